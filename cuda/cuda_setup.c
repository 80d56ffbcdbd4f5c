/* cuda_setup.c: making the CUDA backend (cuda_backend_impl.h): the device, stream and cuBLAS
 * handle, the weights converted to bf16 (or kept f16) and uploaded in one allocation, the KV pool,
 * the activations and the step's metadata and sampling buffers, the decode graphs' buckets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend_impl.h"
#include "kernels.h"

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Bytes a matrix takes on the device in dtype t, rounded up to 256. */
static size_t mat_bytes(const ifl_mat *m, ifl_dtype t)
{
    return align256((size_t)m->rows * (size_t)m->cols * ifl_dtype_size(t));
}

/* Bytes of a (V, C) vocabulary matrix (wte, lm_head) on the device: ldv rows. */
static size_t vocab_bytes(const cuda_backend *be, ifl_dtype t)
{
    return align256((size_t)be->ldv * (size_t)be->C * ifl_dtype_size(t));
}

/* Uploads matrix m (any dtype and layout) as row-major t at dst, through the staging buffer. */
static int upload_mat(void *dst, const ifl_mat *m, ifl_dtype t, void *stage, ifl_err *err)
{
    ifl_mat_repack(stage, IFL_LAYOUT_ROWS, t, m, NULL, NULL);
    CU(cudaMemcpy(dst, stage, (size_t)m->rows * (size_t)m->cols * ifl_dtype_size(t),
                  cudaMemcpyHostToDevice));
    return 0;
}

static int upload_vec(float **dst, char **cursor, const float *src, int32_t n, ifl_err *err)
{
    *dst = (float *)*cursor;
    *cursor += align256((size_t)n * sizeof(float));
    CU(cudaMemcpy(*dst, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return 0;
}

static int upload_weights(cuda_backend *be, const ifl_model *m, ifl_err *err)
{
    ifl_dtype t = be->wdt;
    int tied = m->lm_head.data == m->wte.data;
    if (m->wte.rows != be->V || m->wte.cols != be->C || m->lm_head.rows != be->V ||
        m->lm_head.cols != be->C)
        return ifl_err_set(
            err, "wte is %d x %d and lm_head %d x %d, expected %d x %d (vocab x width)",
            m->wte.rows, m->wte.cols, m->lm_head.rows, m->lm_head.cols, be->V, be->C);
    size_t bytes = vocab_bytes(be, t) + mat_bytes(&m->wpe, t) + (tied ? 0 : vocab_bytes(be, t)) +
                   2 * align256((size_t)be->C * 4);
    size_t largest = (size_t)m->wte.rows * (size_t)m->wte.cols;
    size_t wpe_n = (size_t)m->wpe.rows * (size_t)m->wpe.cols;
    largest = wpe_n > largest ? wpe_n : largest;
    for (int32_t l = 0; l < be->L; l++) {
        const ifl_layer *ly = &m->layers[l];
        const ifl_mat *ms[4] = {&ly->qkv_w, &ly->attn_proj_w, &ly->fc_w, &ly->mlp_proj_w};
        for (int i = 0; i < 4; i++) {
            bytes += mat_bytes(ms[i], t);
            size_t n = (size_t)ms[i]->rows * (size_t)ms[i]->cols;
            largest = n > largest ? n : largest;
        }
        bytes += align256((size_t)be->C * 4) * 6 + align256((size_t)3 * be->C * 4) +
                 align256((size_t)be->F * 4); /* LN1, LN2, two C biases; qkv bias; fc bias */
    }
    if (!tied) {
        size_t n = (size_t)m->lm_head.rows * (size_t)m->lm_head.cols;
        largest = n > largest ? n : largest;
    }
    be->wbytes = bytes;
    CU(cudaMalloc(&be->wmem, bytes));
    void *stage = malloc(largest * ifl_dtype_size(t));
    if (!stage)
        return ifl_err_set(err, "out of memory for a %.0f MiB upload buffer",
                           (double)largest * (double)ifl_dtype_size(t) / 1048576.0);
    char *cur = be->wmem;
    int rc = -1;
#define PLACE_MAT(dst, mat)                                                                        \
    do {                                                                                           \
        (dst) = cur;                                                                               \
        cur += mat_bytes((mat), t);                                                                \
        if (upload_mat((dst), (mat), t, stage, err))                                               \
            goto out;                                                                              \
    } while (0)
#define PLACE_VOCAB(dst, mat) /* V rows, then ldv - V rows of zeros */                             \
    do {                                                                                           \
        (dst) = cur;                                                                               \
        cur += vocab_bytes(be, t);                                                                 \
        if (upload_mat((dst), (mat), t, stage, err))                                               \
            goto out;                                                                              \
        size_t row_ = (size_t)be->C * ifl_dtype_size(t);                                           \
        cudaError_t e_ =                                                                           \
            cudaMemset((char *)(dst) + (size_t)be->V * row_, 0, (size_t)(be->ldv - be->V) * row_); \
        if (e_ != cudaSuccess) {                                                                   \
            ifl_cuda_fail(err, e_, "cudaMemset (vocabulary padding)", __FILE__, __LINE__);         \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)
#define PLACE_VEC(dst, src, n)                                                                     \
    do {                                                                                           \
        if (upload_vec(&(dst), &cur, (src), (n), err))                                             \
            goto out;                                                                              \
    } while (0)
    PLACE_VOCAB(be->wte, &m->wte);
    PLACE_MAT(be->wpe, &m->wpe);
    if (tied)
        be->lm_head = be->wte;
    else
        PLACE_VOCAB(be->lm_head, &m->lm_head);
    PLACE_VEC(be->lnf_w, m->lnf_w, be->C);
    PLACE_VEC(be->lnf_b, m->lnf_b, be->C);
    for (int32_t l = 0; l < be->L; l++) {
        const ifl_layer *ly = &m->layers[l];
        dev_layer *d = &be->layers[l];
        PLACE_MAT(d->qkv_w, &ly->qkv_w);
        PLACE_MAT(d->proj_w, &ly->attn_proj_w);
        PLACE_MAT(d->fc_w, &ly->fc_w);
        PLACE_MAT(d->mproj_w, &ly->mlp_proj_w);
        PLACE_VEC(d->ln1_w, ly->ln1_w, be->C);
        PLACE_VEC(d->ln1_b, ly->ln1_b, be->C);
        PLACE_VEC(d->ln2_w, ly->ln2_w, be->C);
        PLACE_VEC(d->ln2_b, ly->ln2_b, be->C);
        PLACE_VEC(d->proj_b, ly->attn_proj_b, be->C);
        PLACE_VEC(d->mproj_b, ly->mlp_proj_b, be->C);
        PLACE_VEC(d->qkv_b, ly->qkv_b, 3 * be->C);
        PLACE_VEC(d->fc_b, ly->fc_b, be->F);
    }
#undef PLACE_MAT
#undef PLACE_VOCAB
#undef PLACE_VEC
    rc = 0;
out:
    free(stage);
    return rc;
}

/* Activations, metadata, sampling buffers. */
static int alloc_run_state(cuda_backend *be, ifl_err *err)
{
    size_t T = (size_t)be->max_T, S = (size_t)be->max_S, C = (size_t)be->C, F = (size_t)be->F;
    size_t w = ifl_dtype_size(be->wdt);
    size_t sizes[] = {T * C * 4,               /* x */
                      T * 3 * C * 4,           /* qkv */
                      T * (F > C ? F : C) * 4, /* tmp */
                      T * (size_t)be->ldv * 4, /* logits: up to a row per token */
                      T * C * w,               /* xn */
                      T * C * w,               /* att */
                      T * F * w,               /* ff */
                      T * C * w};              /* xf */
    void **dst[] = {(void **)&be->x, (void **)&be->qkv, (void **)&be->tmp, (void **)&be->logits,
                    &be->xn,         &be->att,          &be->ff,           &be->xf};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += align256(sizes[i]);
    be->abytes = total;
    CU(cudaMalloc(&be->amem, total));
    CU(cudaMemset(be->amem, 0, total)); /* padding rows of a graph read finite values */
    char *cur = be->amem;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = cur;
        cur += align256(sizes[i]);
    }
    meta_layout *ml = &be->ml;
    size_t o = 0;
    ml->tokens = o, o += T;
    ml->pos = o, o += T;
    ml->kv_slot = o, o += T;
    ml->n_keys = o, o += T;
    ml->table_row = o, o += T;
    ml->rows = o, o += T;
    ml->tables = o, o += S * (size_t)be->max_blocks;
    ml->n_ints = o;
    CU(cudaMallocHost((void **)&be->h_meta, o * sizeof(int32_t)));
    memset(be->h_meta, 0, o * sizeof(int32_t));
    CU(cudaMalloc((void **)&be->d_meta, o * sizeof(int32_t)));
    CU(cudaMemset(be->d_meta, 0, o * sizeof(int32_t)));
    be->row_run = malloc(T * sizeof *be->row_run);
    if (!be->row_run)
        return ifl_err_set(err, "out of memory for %zu rows' runs", T);
    CU(cudaMallocHost((void **)&be->h_sreq, S * sizeof *be->h_sreq));
    CU(cudaMalloc((void **)&be->d_sreq, S * sizeof *be->d_sreq));
    CU(cudaMallocHost((void **)&be->h_tok, S * sizeof(int32_t)));
    CU(cudaMalloc((void **)&be->d_tok, S * sizeof(int32_t)));
    size_t scratch = ifl_cuda_sample_scratch_bytes(be->max_S, be->V);
    if (scratch)
        CU(cudaMalloc(&be->sample_scratch, scratch));
    return 0;
}

int ifl_cuda_backend_init(cuda_backend *be, const ifl_model *m, ifl_err *err)
{
    const ifl_config *c = &m->cfg;
    const ifl_backend_params *p = &be->base.params;
    be->L = c->n_layer;
    be->H = c->n_head;
    be->C = c->n_embd;
    be->D = c->n_embd / c->n_head;
    be->F = ifl_config_n_inner(c);
    be->V = c->n_vocab;
    be->ldv = (be->V + 15) / 16 * 16;
    be->P = c->n_ctx;
    be->BS = p->kv_block_size;
    be->max_T = p->max_tokens;
    be->max_S = p->max_seqs;
    be->max_blocks = (be->P + be->BS - 1) / be->BS;
    be->attn_scale = c->scale_attn_weights ? 1.0f / sqrtf((float)be->D) : 1.0f;
    be->erf_gelu = c->gelu == IFL_GELU_ERF;
    be->eps = (float)c->ln_eps;
    if (be->D > 256)
        return ifl_err_set(err, "cuda: head size %d is larger than the attention kernel's 256",
                           be->D);
    if (be->max_T > 65535)
        return ifl_err_set(err, "cuda: max_tokens %d is more than one launch's 65535 rows",
                           be->max_T);
    /* formats the registry does not give this backend (q8): refused by name, never converted */
    const ifl_mat *mats[2] = {&m->wte, &m->lm_head};
    for (int i = 0; i < 2 + 4 * be->L; i++) {
        const ifl_layer *ly = i >= 2 ? &m->layers[(i - 2) / 4] : NULL;
        const ifl_mat *w = !ly                ? mats[i]
                           : (i - 2) % 4 == 0 ? &ly->qkv_w
                           : (i - 2) % 4 == 1 ? &ly->attn_proj_w
                           : (i - 2) % 4 == 2 ? &ly->fc_w
                                              : &ly->mlp_proj_w;
        const ifl_format *f = ifl_format_get(w->dtype);
        if (!f || !(f->backends & IFL_BACKEND_CUDA)) {
            char fl[64];
            return ifl_err_set(err, "cuda: the CUDA backend runs %s weights, not %s (--weights %s "
                               "runs on the CPU: --device cpu)",
                               ifl_format_list(IFL_BACKEND_CUDA, fl, sizeof fl),
                               ifl_dtype_name(w->dtype), ifl_dtype_name(w->dtype));
        }
    }
    /* f16 matrices stay f16; everything else (f32, bf16, mixed) is held as bf16 */
    be->wdt = !m->mixed_dtypes && m->wte.dtype == IFL_DTYPE_F16 ? IFL_DTYPE_F16 : IFL_DTYPE_BF16;
    be->wtype = be->wdt == IFL_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;

    if (ifl_cuda_probe(be->dev_desc, sizeof be->dev_desc, err))
        return -1;
    CU(cudaSetDevice(0));
    size_t att_need = 0, att_limit = 0;
    int ae = ifl_cuda_attention_setup(be->max_blocks * be->BS, &att_need, &att_limit);
    if (ae == (int)cudaErrorInvalidValue)
        return ifl_err_set(err,
                           "cuda: a %d-position context needs %zu bytes of shared memory per "
                           "attention block, the device allows %zu",
                           be->P, att_need, att_limit);
    KERNEL(ae);
    CU(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    BLAS(cublasCreate(&be->blas));
    BLAS(cublasSetStream(be->blas, be->stream));
    be->blas_ws_bytes = 32u << 20;
    CU(cudaMalloc(&be->blas_ws, be->blas_ws_bytes));
    BLAS(cublasSetWorkspace(be->blas, be->blas_ws, be->blas_ws_bytes));
    BLAS(cublasSetMathMode(be->blas, CUBLAS_DEFAULT_MATH));

    be->layers = calloc((size_t)be->L, sizeof *be->layers);
    if (!be->layers)
        return ifl_err_set(err, "out of memory");
    if (upload_weights(be, m, err))
        return ifl_err_prefix(err, "cuda: uploading %s weights", ifl_dtype_name(be->wdt));
    be->kv_bytes = (size_t)p->kv_blocks * (size_t)be->L * 2 * (size_t)be->C * (size_t)be->BS *
                   ifl_dtype_size(be->wdt);
    cudaError_t e = cudaMalloc(&be->kv, be->kv_bytes);
    if (e != cudaSuccess) {
        ifl_cuda_fail(err, e, "cudaMalloc(KV pool)", __FILE__, __LINE__);
        return ifl_err_prefix(err, "cuda: the KV pool of %d blocks (%.0f MiB; lower --kv-mem-mb)",
                              p->kv_blocks, (double)be->kv_bytes / 1048576.0);
    }
    if (alloc_run_state(be, err))
        return ifl_err_prefix(err, "cuda: activations for %d tokens x %d sequences", be->max_T,
                              be->max_S);

    const char *g = getenv("IFL_CUDA_GRAPHS");
    be->use_graphs = !(g && !strcmp(g, "0"));
    for (int32_t sz = 1; sz < be->max_S && be->n_buckets < N_BUCKETS - 1; sz *= 2)
        be->bucket_size[be->n_buckets++] = sz;
    be->bucket_size[be->n_buckets++] = be->max_S;
    /* The uploads and memsets above went to the legacy stream, which the step stream (non-blocking)
     * does not wait for. */
    CU(cudaDeviceSynchronize());
    return 0;
}
