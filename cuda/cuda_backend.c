/* cuda_backend.c: the GPT-2 forward pass on an NVIDIA GPU behind the backend interface
 * (backend.h, cuda_backend.h): the host side, in C. Kernels are in the .cu files (kernels.h).
 *
 * One step over a ragged batch of T tokens from S sequences, all on one stream:
 *   meta  <- tokens, positions, KV slots, key counts, block tables  (one host-to-device copy)
 *   x = wte[tok] + wpe[pos]                         embed.cu          (T, C) f32
 *   xn = LN1(x)                                     layernorm.cu      (T, C) w
 *   per layer: qkv = xn Wqkv                        cuBLAS            (T, 3C) f32
 *              qkv += b; pool <- k, v               kv.cu
 *              att = attention(q, pool)             attention.cu      (T, C) w
 *              tmp = att Wproj                      cuBLAS            (T, C) f32
 *              x += tmp + b; xn = LN2(x)            layernorm.cu
 *              tmp = xn Wfc                         cuBLAS            (T, F) f32
 *              ff = gelu(tmp + b)                   gelu.cu           (T, F) w
 *              tmp = ff Wmproj                      cuBLAS            (T, C) f32
 *              x += tmp + b; xn = LN1'(x)           layernorm.cu (the next layer's LN1)
 *   xf = LNf(x[rows asked for])                     layernorm.cu      (R, C) w
 *   logits = xf wte^T                               cuBLAS            (R, V) f32, rows ldv apart
 * where w is the weights' dtype (bf16, or f16): the GEMMs read w and accumulate in f32 on the
 * tensor cores (cublasGemmEx, CUBLAS_COMPUTE_32F). Then either the logits are copied to the host
 * (step) or sample.cu draws each run's next token and only S ids come back (step_sample), after
 * logit_adj.cu has applied the rows' adjustments (penalties, logit_bias, bans) when some have any.
 * R is the rows the runs asked for (ifl_batch.n_rows, by default each run's last token), gathered
 * by index (meta rows): a step of prefill chunks that end no prompt runs no lm_head. KV blocks are
 * copied on the same stream (copy_blocks).
 *
 * Decode-only steps (every run one token) have a fixed shape for a given S, so they are captured
 * once per batch-size bucket (1, 2, 4, ..., max_seqs) as a CUDA graph and replayed: the metadata
 * lives at fixed device addresses, rows past S are padding (no KV slot, no keys, never sampled).
 * A bucket's first step runs eagerly (loading kernels and cuBLAS's choices), its second is
 * captured. IFL_CUDA_GRAPHS=0 in the environment turns graphs off. Prefill steps run eagerly.
 *
 * Every CUDA and cuBLAS call is checked; an error names the call, the file and the line. Making
 * the backend (weights, pool, buffers) is cuda_setup.c's; the state both share is in
 * cuda_backend_impl.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend_impl.h"
#include "defaults.h"
#include "kernels.h"

/* ---- error checking -------------------------------------------------------------------------- */

int ifl_cuda_fail(ifl_err *err, cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaErrorMemoryAllocation && !strncmp(call, "cudaMallocHost", 14))
        return ifl_err_set(err, "out of pinned host memory: %s at %s:%d", call, file, line);
    if (e == cudaErrorMemoryAllocation) {
        size_t fr = 0, tot = 0;
        cudaGetLastError(); /* clear it so cudaMemGetInfo can answer */
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
            return ifl_err_set(err,
                               "CUDA out of memory: %s at %s:%d (the device has %.0f MiB free of "
                               "%.0f MiB)",
                               call, file, line, (double)fr / 1048576.0, (double)tot / 1048576.0);
    }
    return ifl_err_set(err, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorString(e),
                       cudaGetErrorName(e), file, line);
}

int ifl_cublas_fail(ifl_err *err, cublasStatus_t s, const char *call, const char *file, int line)
{
    return ifl_err_set(err, "%s failed: %s (%d) at %s:%d", call, cublasGetStatusString(s), (int)s,
                       file, line);
}

/* ---- the probe ------------------------------------------------------------------------------- */

int ifl_cuda_probe(char *desc, int cap, ifl_err *err)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return ifl_err_set(err, "no usable CUDA device: cudaGetDeviceCount: %s (%s)",
                           cudaGetErrorString(e), cudaGetErrorName(e));
    if (n < 1)
        return ifl_err_set(err, "no CUDA device found");
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess)
        return ifl_err_set(err, "cudaGetDeviceProperties(0): %s", cudaGetErrorString(e));
    e = (cudaError_t)ifl_cuda_kernels_loadable();
    if (e != cudaSuccess && e != cudaErrorNoKernelImageForDevice &&
        e != cudaErrorInvalidDeviceFunction)
        return ifl_err_set(err, "CUDA device 0 (%s, sm_%d%d) is not usable: %s (%s)", prop.name,
                           prop.major, prop.minor, cudaGetErrorString(e), cudaGetErrorName(e));
    if (e != cudaSuccess)
        return ifl_err_set(err,
                           "CUDA device 0 (%s, sm_%d%d) cannot run this build's kernels: %s (the "
                           "build targets CMAKE_CUDA_ARCHITECTURES %s; rebuild with %d%d)",
                           prop.name, prop.major, prop.minor, cudaGetErrorString(e),
                           INFLIGHT_CUDA_ARCHS, prop.major, prop.minor);
    if (desc && cap > 0)
        snprintf(desc, (size_t)cap, "%s, sm_%d%d, %.1f GiB", prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

/* ---- the forward pass ------------------------------------------------------------------------ */

/* y (M, N) f32 = x (M, K) @ W (K, N), everything row-major; W and x in the weights' dtype. In
 * cuBLAS's column-major terms: y^T (N, M) = W^T (N, K) x^T (K, M). */
static int gemm_kn(cuda_backend *be, float *y, const void *x, const void *W, int32_t M, int32_t K,
                   int32_t N, ifl_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    BLAS(cublasGemmEx(be->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, W, be->wtype, N, x,
                      be->wtype, K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* Enqueues the forward pass for T token rows and R rows of logits whose metadata is on the device
 * (d_meta). Nothing here synchronises, so it can be captured into a graph. */
static int forward(cuda_backend *be, int32_t T, int32_t R, ifl_err *err)
{
    cudaStream_t st = be->stream;
    const meta_layout *ml = &be->ml;
    int32_t *d = be->d_meta;
    int32_t C = be->C, F = be->F, L = be->L, H = be->H;
    KERNEL(ifl_cuda_embed(be->x, be->wte, be->wpe, be->wdt, d + ml->tokens, d + ml->pos, T, C, st));
    KERNEL(ifl_cuda_add_layernorm(be->xn, be->wdt, be->x, NULL, NULL, be->layers[0].ln1_w,
                                  be->layers[0].ln1_b, NULL, T, C, be->eps, st));
    for (int32_t l = 0; l < L; l++) {
        const dev_layer *ly = &be->layers[l];
        if (gemm_kn(be, be->qkv, be->xn, ly->qkv_w, T, C, 3 * C, err))
            return ifl_err_prefix(err, "layer %d, qkv product", l);
        KERNEL(ifl_cuda_qkv_bias_kv_append(be->qkv, ly->qkv_b, be->kv, be->wdt, d + ml->kv_slot, T,
                                           C, H, l, L, be->BS, st));
        float scale = be->attn_scale;
        if (be->base.model->cfg.scale_attn_by_inverse_layer_idx)
            scale /= (float)(l + 1);
        KERNEL(ifl_cuda_attention(be->att, be->wdt, be->qkv, be->kv, be->wdt, d + ml->n_keys,
                                  d + ml->table_row, d + ml->tables, be->max_blocks, T, C, H, l, L,
                                  be->BS, be->max_blocks * be->BS, scale, st));
        if (gemm_kn(be, be->tmp, be->att, ly->proj_w, T, C, C, err))
            return ifl_err_prefix(err, "layer %d, attention projection product", l);
        KERNEL(ifl_cuda_add_layernorm(be->xn, be->wdt, be->x, be->tmp, ly->proj_b, ly->ln2_w,
                                      ly->ln2_b, NULL, T, C, be->eps, st));
        if (gemm_kn(be, be->tmp, be->xn, ly->fc_w, T, C, F, err))
            return ifl_err_prefix(err, "layer %d, fc product", l);
        KERNEL(ifl_cuda_bias_gelu(be->ff, be->wdt, be->tmp, ly->fc_b, T, F, be->erf_gelu, st));
        if (gemm_kn(be, be->tmp, be->ff, ly->mproj_w, T, F, C, err))
            return ifl_err_prefix(err, "layer %d, MLP projection product", l);
        if (l + 1 < L)
            KERNEL(ifl_cuda_add_layernorm(be->xn, be->wdt, be->x, be->tmp, ly->mproj_b,
                                          be->layers[l + 1].ln1_w, be->layers[l + 1].ln1_b, NULL, T,
                                          C, be->eps, st));
        else
            KERNEL(ifl_cuda_add_layernorm(NULL, be->wdt, be->x, be->tmp, ly->mproj_b, be->lnf_w,
                                          be->lnf_b, NULL, T, C, be->eps, st));
    }
    if (R == 0)
        return 0; /* no run asked for a row */
    KERNEL(ifl_cuda_add_layernorm(be->xf, be->wdt, be->x, NULL, NULL, be->lnf_w, be->lnf_b,
                                  d + ml->rows, R, C, be->eps, st));
    /* logits^T (ldv, S) = lm_head (ldv, C) xf^T (C, S): lm_head row-major is column-major (C, ldv)
     */
    const float one = 1.0f, zero = 0.0f;
    BLAS(cublasGemmEx(be->blas, CUBLAS_OP_T, CUBLAS_OP_N, be->ldv, R, C, &one, be->lm_head,
                      be->wtype, C, be->xf, be->wtype, C, &zero, be->logits, CUDA_R_32F, be->ldv,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

/* The bucket of a decode step of S sequences: the smallest bucket size >= S. */
static int bucket_of(const cuda_backend *be, int32_t S)
{
    for (int i = 0; i < be->n_buckets; i++)
        if (be->bucket_size[i] >= S)
            return i;
    return -1;
}

/* The rows of logits the device computes (meta rows, be->row_run, be->n_dev_rows): a decode graph's
 * every row (row s is run s's token; those nobody asked for are computed and not copied), else
 * exactly the rows the runs asked for, run by run. */
static void fill_rows(cuda_backend *be, const ifl_batch *b, int graph, int32_t S_pad)
{
    int32_t *rows = be->h_meta + be->ml.rows, n = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t k = b->n_rows ? b->n_rows[s] : 1, end = b->run_start[s + 1];
        if (graph) { /* decode only: one token per run, k 0 or 1 */
            rows[n] = s;
            be->row_run[n++] = k > 0 ? s : -1;
            continue;
        }
        for (int32_t i = end - k; i < end; i++) {
            rows[n] = i;
            be->row_run[n++] = s;
        }
    }
    for (; graph && n < S_pad; n++) { /* padding */
        rows[n] = n;
        be->row_run[n] = -1;
    }
    be->n_dev_rows = n;
}

/* Fills the host metadata for the batch, padded to T_pad tokens and S_pad sequences. */
static void fill_meta(cuda_backend *be, const ifl_batch *b, int32_t T_pad, int32_t S_pad)
{
    const meta_layout *ml = &be->ml;
    int32_t *h = be->h_meta;
    int32_t BS = be->BS;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t r0 = b->run_start[s], r1 = b->run_start[s + 1];
        int32_t need = (b->pos0[s] + (r1 - r0) + BS - 1) / BS;
        int32_t *row = h + ml->tables + (size_t)s * be->max_blocks;
        memcpy(row, b->block_tables[s], (size_t)need * sizeof *row);
        for (int32_t i = r0; i < r1; i++) {
            int32_t pos = b->pos0[s] + (i - r0);
            h[ml->tokens + i] = b->tokens[i];
            h[ml->pos + i] = pos;
            h[ml->kv_slot + i] = row[pos / BS] * BS + pos % BS;
            h[ml->n_keys + i] = pos + 1;
            h[ml->table_row + i] = s;
        }
    }
    for (int32_t i = b->n_tokens; i < T_pad; i++) { /* padding: no slot, no keys */
        h[ml->tokens + i] = 0;
        h[ml->pos + i] = 0;
        h[ml->kv_slot + i] = -1;
        h[ml->n_keys + i] = 0;
        h[ml->table_row + i] = 0;
    }
}

static int is_decode_only(const ifl_batch *b)
{
    return b->n_tokens == b->n_seqs;
}

/* Runs the forward pass of a validated batch up to the logits on the device. */
static int run_forward(cuda_backend *be, const ifl_batch *b, ifl_err *err)
{
    int32_t T = b->n_tokens, S = b->n_seqs;
    int bk = -1;
    if (be->use_graphs && is_decode_only(b))
        bk = bucket_of(be, S);
    int32_t T_pad = bk >= 0 ? be->bucket_size[bk] : T;
    int32_t S_pad = bk >= 0 ? be->bucket_size[bk] : S;
    fill_meta(be, b, T_pad, S_pad);
    fill_rows(be, b, bk >= 0, S_pad);
    /* the block tables are the last section: copy only the rows this step has */
    size_t n_ints = be->ml.tables + (size_t)S_pad * (size_t)be->max_blocks;
    CU(cudaMemcpyAsync(be->d_meta, be->h_meta, n_ints * sizeof(int32_t), cudaMemcpyHostToDevice,
                       be->stream));
    be->steps++;
    if (bk < 0)
        return forward(be, T, be->n_dev_rows, err);
    if (be->graph[bk]) {
        be->graph_steps++;
        CU(cudaGraphLaunch(be->graph[bk], be->stream));
        return 0;
    }
    if (!be->bucket_seen[bk]) { /* first time: eager, so kernels and cuBLAS's plans are loaded */
        be->bucket_seen[bk] = 1;
        return forward(be, T_pad, S_pad, err);
    }
    cudaGraph_t g = NULL;
    CU(cudaStreamBeginCapture(be->stream, cudaStreamCaptureModeThreadLocal));
    int rc = forward(be, T_pad, S_pad, err);
    cudaError_t e = cudaStreamEndCapture(be->stream, &g);
    if (rc == 0 && e == cudaSuccess)
        e = cudaGraphInstantiate(&be->graph[bk], g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (rc != 0 || e != cudaSuccess) {
        /* Capture failed: say so once, and run decode steps eagerly from now on. */
        fprintf(stderr,
                "inflight: cuda: capturing the decode graph for batch %d failed (%s); "
                "decode steps run eagerly\n",
                be->bucket_size[bk], rc && err ? err->msg : cudaGetErrorString(e));
        cudaGetLastError();
        be->graph[bk] = NULL;
        be->use_graphs = 0;
        be->graph_failed = 1;
        be->n_dev_rows = S; /* the graph's rows without its padding: row s is run s's */
        return forward(be, T, S, err);
    }
    be->graph_steps++;
    CU(cudaGraphLaunch(be->graph[bk], be->stream));
    return 0;
}

static int step_logits(cuda_backend *be, const ifl_batch *b, float *logits, ifl_err *err)
{
    if (run_forward(be, b, err))
        return ifl_err_prefix(err, "cuda step");
    /* the asked-for rows, in order: one copy per stretch of consecutive device rows */
    int32_t out = 0;
    for (int32_t j = 0; j < be->n_dev_rows;) {
        if (be->row_run[j] < 0) {
            j++;
            continue;
        }
        int32_t j1 = j + 1;
        while (j1 < be->n_dev_rows && be->row_run[j1] >= 0)
            j1++;
        CU(cudaMemcpy2DAsync(logits + (size_t)out * (size_t)be->V, (size_t)be->V * sizeof(float),
                             be->logits + (size_t)j * (size_t)be->ldv,
                             (size_t)be->ldv * sizeof(float), (size_t)be->V * sizeof(float),
                             (size_t)(j1 - j), cudaMemcpyDeviceToHost, be->stream));
        out += j1 - j;
        j = j1;
    }
    CU(cudaStreamSynchronize(be->stream));
    return 0;
}

/* Room for n adjustment ops in the pinned and device buffers (grown, never shrunk; the step
 * before has synchronised, so nothing reads the old ones). */
static int adj_reserve(cuda_backend *be, int32_t n, ifl_err *err)
{
    if (!be->h_adj_rows) {
        CU(cudaMallocHost((void **)&be->h_adj_rows, (size_t)(be->max_S + 1) * sizeof(int32_t)));
        CU(cudaMalloc((void **)&be->d_adj_rows, (size_t)(be->max_S + 1) * sizeof(int32_t)));
    }
    if (n <= be->adj_cap)
        return 0;
    int32_t cap = be->adj_cap * 2 > n ? be->adj_cap * 2 : n;
    cap = cap < 4096 ? 4096 : cap;
    cudaFreeHost(be->h_adj_ops);
    cudaFree(be->d_adj_ops);
    be->h_adj_ops = NULL;
    be->d_adj_ops = NULL;
    be->adj_cap = 0;
    CU(cudaMallocHost((void **)&be->h_adj_ops, (size_t)cap * sizeof *be->h_adj_ops));
    CU(cudaMalloc((void **)&be->d_adj_ops, (size_t)cap * sizeof *be->d_adj_ops));
    be->adj_cap = cap;
    return 0;
}

/* The request device row j is drawn with (be->row_run), NULL for a row nobody draws from. */
static const ifl_sample_req *row_req(const cuda_backend *be, int32_t j, const ifl_sample_req *req)
{
    int32_t s = be->row_run[j];
    return s >= 0 && req[s].active ? &req[s] : NULL;
}

/* Enqueues the active rows' logit adjustments (ifl_sample_req.adj) on the device logits (S rows):
 * nothing at all when no row has any, else only their ops cross. */
static int adjust_rows(cuda_backend *be, int32_t S, const ifl_sample_req *req, ifl_err *err)
{
    int32_t n = 0;
    for (int32_t s = 0; s < S; s++)
        if (row_req(be, s, req) && row_req(be, s, req)->adj)
            n += ifl_logit_adj_n_ops(row_req(be, s, req)->adj);
    if (n == 0)
        return 0;
    if (adj_reserve(be, n, err))
        return -1;
    int32_t at = 0;
    for (int32_t s = 0; s < S; s++) {
        be->h_adj_rows[s] = at;
        const ifl_sample_req *r = row_req(be, s, req);
        if (r && r->adj)
            at += ifl_logit_adj_ops(r->adj, be->h_adj_ops + at);
    }
    be->h_adj_rows[S] = at;
    CU(cudaMemcpyAsync(be->d_adj_rows, be->h_adj_rows, (size_t)(S + 1) * sizeof(int32_t),
                       cudaMemcpyHostToDevice, be->stream));
    CU(cudaMemcpyAsync(be->d_adj_ops, be->h_adj_ops, (size_t)at * sizeof *be->h_adj_ops,
                       cudaMemcpyHostToDevice, be->stream));
    KERNEL(ifl_cuda_logit_adjust(be->logits, be->ldv, be->V, be->d_adj_ops, be->d_adj_rows, S,
                                 be->stream));
    return 0;
}

static int step_tokens(cuda_backend *be, const ifl_batch *b, const ifl_sample_req *req,
                       int32_t *tokens, ifl_err *err)
{
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (req[s].active && ifl_sampling_validate(&req[s].sampling, err))
            return ifl_err_prefix(err, "sequence %d", s);
    if (run_forward(be, b, err))
        return ifl_err_prefix(err, "cuda step");
    /* one request per device row (built while the forward pass runs): at most one row per run */
    int32_t R = be->n_dev_rows;
    while (R > 0 && be->row_run[R - 1] < 0) /* a graph's padding: nothing to draw */
        R--;
    for (int32_t j = 0; j < R; j++) {
        const ifl_sample_req *r = row_req(be, j, req);
        be->h_sreq[j] = (ifl_cuda_sample_req){.active = 0};
        if (r)
            be->h_sreq[j] = (ifl_cuda_sample_req){.temperature = r->sampling.temperature,
                                                  .top_k = r->sampling.top_k,
                                                  .top_p = r->sampling.top_p,
                                                  .active = 1,
                                                  .seed = r->seed,
                                                  .draw = r->draw,
                                                  .min_p = r->sampling.min_p,
                                                  .min_p_cut =
                                                      ifl_sampling_min_p_cut(&r->sampling)};
    }
    for (int32_t s = 0; s < b->n_seqs; s++)
        tokens[s] = -1;
    if (R == 0) /* no active run: nothing to draw */
        return 0;
    if (adjust_rows(be, R, req, err))
        return ifl_err_prefix(err, "cuda step, logit adjustments");
    CU(cudaMemcpyAsync(be->d_sreq, be->h_sreq, (size_t)R * sizeof *be->h_sreq,
                       cudaMemcpyHostToDevice, be->stream));
    KERNEL(ifl_cuda_sample(be->d_tok, be->logits, be->d_sreq, R, be->V, be->ldv,
                           be->sample_scratch, be->stream));
    CU(cudaMemcpyAsync(be->h_tok, be->d_tok, (size_t)R * sizeof(int32_t), cudaMemcpyDeviceToHost,
                       be->stream));
    CU(cudaStreamSynchronize(be->stream));
    for (int32_t j = 0; j < R; j++)
        if (row_req(be, j, req))
            tokens[be->row_run[j]] = be->h_tok[j];
    return 0;
}

/* A step that failed part-way may have copies in flight that read the pinned buffers the next
 * step refills: wait for the stream (its own error, if any, is already in err). */
static int step_failed(cuda_backend *be)
{
    cudaStreamSynchronize(be->stream);
    return -1;
}

static int cuda_step(ifl_backend *base, const ifl_batch *b, float *logits, ifl_err *err)
{
    cuda_backend *be = (cuda_backend *)base;
    if (ifl_batch_validate(base, b, err))
        return -1;
    return step_logits(be, b, logits, err) ? step_failed(be) : 0;
}

static int cuda_step_sample(ifl_backend *base, const ifl_batch *b, const ifl_sample_req *req,
                            int32_t *tokens, ifl_err *err)
{
    cuda_backend *be = (cuda_backend *)base;
    if (ifl_batch_validate(base, b, err))
        return -1;
    for (int32_t s = 0; b->n_rows && s < b->n_seqs; s++)
        if (b->n_rows[s] > 1)
            return ifl_err_set(err, "cuda step_sample: sequence %d asks for %d rows (at most 1)", s,
                               b->n_rows[s]);
    return step_tokens(be, b, req, tokens, err) ? step_failed(be) : 0;
}

/* KV block src[i] into dst[i] (every layer, keys and values: a block is one run of the pool,
 * kv.cu's layout), device to device on the step's stream, so the next step sees the copies. */
static int cuda_copy_blocks(ifl_backend *base, const int32_t *src, const int32_t *dst, int32_t n,
                            ifl_err *err)
{
    cuda_backend *be = (cuda_backend *)base;
    int32_t nb = base->params.kv_blocks;
    size_t bytes = be->kv_bytes / (size_t)nb;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= nb || dst[i] < 0 || dst[i] >= nb)
            return ifl_err_set(err, "copy_blocks: copy %d is block %d -> %d, outside the pool [0, %d)",
                               i, src[i], dst[i], nb);
        if (src[i] != dst[i])
            CU(cudaMemcpyAsync((char *)be->kv + (size_t)dst[i] * bytes,
                               (const char *)be->kv + (size_t)src[i] * bytes, bytes,
                               cudaMemcpyDeviceToDevice, be->stream));
    }
    return 0;
}

/* ---- set-up and tear-down -------------------------------------------------------------------- */

static void cuda_free(ifl_backend *base)
{
    cuda_backend *be = (cuda_backend *)base;
    if (!be)
        return;
    if (be->stream)
        cudaStreamSynchronize(be->stream);
    if (getenv("IFL_PROFILE") && be->steps)
        fprintf(stderr, "cuda backend: %lld steps, %lld replayed from decode graphs\n",
                (long long)be->steps, (long long)be->graph_steps);
    for (int i = 0; i < N_BUCKETS; i++)
        if (be->graph[i])
            cudaGraphExecDestroy(be->graph[i]);
    if (be->blas)
        cublasDestroy(be->blas);
    cudaFree(be->blas_ws);
    cudaFree(be->wmem);
    cudaFree(be->kv);
    cudaFree(be->amem);
    cudaFree(be->d_meta);
    cudaFree(be->d_sreq);
    cudaFree(be->d_tok);
    cudaFree(be->sample_scratch);
    cudaFree(be->d_adj_ops);
    cudaFree(be->d_adj_rows);
    cudaFreeHost(be->h_adj_ops);
    cudaFreeHost(be->h_adj_rows);
    cudaFreeHost(be->h_meta);
    cudaFreeHost(be->h_sreq);
    cudaFreeHost(be->h_tok);
    if (be->stream)
        cudaStreamDestroy(be->stream);
    free(be->row_run);
    free(be->layers);
    free(be);
}

static void cuda_describe(const ifl_backend *base, char *buf, int cap)
{
    const cuda_backend *be = (const cuda_backend *)base;
    snprintf(buf, (size_t)cap,
             "cuda: %s, weights %s (%.0f MiB), KV pool %d blocks x %d tokens (%.0f MiB, %s), "
             "decode graphs %s",
             be->dev_desc, ifl_dtype_name(be->wdt), (double)be->wbytes / 1048576.0,
             base->params.kv_blocks, base->params.kv_block_size, (double)be->kv_bytes / 1048576.0,
             ifl_dtype_name(be->wdt),
             be->use_graphs     ? "on"
             : be->graph_failed ? "off (a capture failed)"
                                : "off (IFL_CUDA_GRAPHS=0)");
}

static const ifl_backend_ops cuda_ops = {
    .name = "cuda",
    .free = cuda_free,
    .step = cuda_step,
    .step_sample = cuda_step_sample,
    .copy_blocks = cuda_copy_blocks,
    .describe = cuda_describe,
};

ifl_backend *ifl_cuda_backend_new(const ifl_model *m, const ifl_backend_params *params,
                                  ifl_err *err)
{
    /* the pool holds bf16 or f16: 2-byte elements, up to IFL_DEFAULT_KV_MEM_MB_CUDA by default */
    cuda_backend *be =
        ifl_backend_alloc(sizeof *be, &cuda_ops, m, params, 2, IFL_DEFAULT_KV_MEM_MB_CUDA, err);
    if (!be)
        return NULL;
    if (ifl_cuda_backend_init(be, m, err)) {
        cuda_free(&be->base);
        return NULL;
    }
    return &be->base;
}
