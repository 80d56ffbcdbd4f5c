/* cpu_backend.c: the GPT-2 forward pass on the CPU behind the backend interface (backend.h).
 *
 * One step over a ragged batch of T tokens from S sequences:
 *   x = wte[tok] + wpe[pos]                                   (T, C)
 *   per layer: xn = LN1(x); qkv = xn Wqkv + b                 (T, 3C)
 *              append k, v of every token to its sequence's KV blocks
 *              att = causal attention of each token over its sequence's positions 0..pos
 *              x += att Wproj + b; xn = LN2(x); ff = gelu(xn Wfc + b); x += ff Wmproj + b
 *   xf = LNf(x[rows asked for: by default each run's last token])  (R, C)
 *   logits = xf lm_head^T                                      (R, V)
 * Matrix products and attention are split across the thread pool; the kernels are those of the
 * process's kernel family when the backend is made (cpu_isa.h, cpu_kernels.h). OpenBLAS, used only
 * when asked (--sgemm-above), runs single-threaded inside each pool thread so that only one set of
 * threads ever competes for the cores.
 *
 * KV pool layout, f32, per block: [layer][k|v][head], where a head's K part is (D, BS) (transposed,
 * so scores for a block are one vectorised pass per d) and its V part is (BS, D). The state is in
 * cpu_backend_impl.h; sampling, scoring and block copies are cpu_backend_rows.c's. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef INFLIGHT_HAVE_BLAS
#include <cblas.h>
#endif

#include "backend.h"
#include "cpu_backend_impl.h"
#include "cpu_kernels.h"
#include "cpu_kernels_isa.h"
#include "defaults.h"
#include "threadpool.h"
#include "util.h"
#include "work_ranges.h"

static const char *const phase_names[PH_COUNT] = {"embed",    "layernorm", "qkv",
                                                  "kv-write", "attention", "attn-proj",
                                                  "fc+gelu",  "mlp-proj",  "lm_head"};

/* ---- tasks (run on every pool thread) -------------------------------------------------------- */

static void task_embed(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    const ifl_model *m = be->base.model;
    int32_t C = be->C;
    for (int32_t t = ith; t < be->batch->n_tokens; t += nth) {
        float *x = be->x + (size_t)t * C;
        int32_t tok = be->batch->tokens[t], pos = be->tok_pos[t];
        ifl_mat_row_f32(&m->wte, tok, x);
        float *tmp = be->att + (size_t)t * C; /* att is free at this point */
        ifl_mat_row_f32(&m->wpe, pos, tmp);
        for (int32_t i = 0; i < C; i++)
            x[i] += tmp[i];
    }
}

static void task_layernorm(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    float eps = (float)be->base.model->cfg.ln_eps;
    for (int32_t r = ith; r < be->n_rows; r += nth) {
        int32_t src = be->ln_rows ? be->ln_rows[r] : r;
        be->k->layernorm(be->ln_out + (size_t)r * be->C, be->ln_in + (size_t)src * be->C,
                         be->ln_w, be->ln_b, be->C, eps);
    }
}

static void task_matmul(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    ifl_matmul_thread(&be->mm, ith, nth);
}

static void task_matmul_finish(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    ifl_matmul_finish_thread(&be->mm, ith, nth);
}

static inline float *kv_k(const cpu_backend *be, int32_t block, int32_t layer, int32_t h)
{
    return be->kv + (size_t)block * be->block_floats +
           ((size_t)(layer * 2 + 0) * be->H + (size_t)h) * (size_t)be->D * be->BS;
}

static inline float *kv_v(const cpu_backend *be, int32_t block, int32_t layer, int32_t h)
{
    return be->kv + (size_t)block * be->block_floats +
           ((size_t)(layer * 2 + 1) * be->H + (size_t)h) * (size_t)be->D * be->BS;
}

/* Appends k and v of every token of the step to its sequence's blocks: share ith of the (token,
 * head) pairs, so that at one token both threads' misses are in flight (the transposed keys put
 * each of a head's D values on its own cache line, all of them cold after the weights' stream). */
static void task_kv_write(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    const ifl_batch *b = be->batch;
    int32_t C = be->C, D = be->D, BS = be->BS, H = be->H, p0, p1;
    ifl_kernel_split(b->n_tokens * H, ith, nth, 1, &p0, &p1);
    for (int32_t p = p0; p < p1; p++) {
        int32_t t = p / H, h = p % H;
        int32_t s = be->tok_seq[t], pos = be->tok_pos[t];
        int32_t block = b->block_tables[s][pos / BS], slot = pos % BS;
        const float *k = be->qkv + (size_t)t * 3 * C + C + (size_t)h * D;
        const float *v = k + C;
        float *kd = kv_k(be, block, be->layer, h);
        float *vd = kv_v(be, block, be->layer, h) + (size_t)slot * D;
        for (int32_t d = 0; d < D; d++)
            kd[(size_t)d * BS + slot] = k[d];
        memcpy(vd, v, (size_t)D * sizeof *vd);
    }
}

/* Splits each sequence's run of the step into tiles of up to IFL_ATTN_TILE consecutive tokens
 * (the queries that share a pass over each KV block); returns how many. */
static int32_t attention_tiles(cpu_backend *be, const ifl_batch *b)
{
    int32_t n = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        for (int32_t t = b->run_start[s]; t < b->run_start[s + 1]; t += IFL_ATTN_TILE)
            be->tile_tok[n++] = t;
    return n;
}

/* How many tokens tile i has: up to IFL_ATTN_TILE, fewer at its run's end. */
static int32_t tile_len(const cpu_backend *be, const ifl_batch *b, int32_t i)
{
    int32_t t0 = be->tile_tok[i], s = be->tok_seq[t0];
    int32_t end = b->run_start[s + 1];
    return end - t0 < IFL_ATTN_TILE ? end - t0 : IFL_ATTN_TILE;
}

/* KV blocks the nq tokens t0.. (one sequence, consecutive positions) see: those holding every
 * position up to the last token's. */
static inline int32_t tile_blocks(const cpu_backend *be, int32_t t0, int nq)
{
    return (be->tok_pos[t0] + nq + be->BS - 1) / be->BS;
}

/* Causal attention of the nq tokens t0.. (one sequence, consecutive positions) for head h: the
 * scores of every block any of them sees, for all of them at once (a token's scores past its own
 * position are computed and never used), then per token its softmax, then the values: the slots
 * all of them see together, the rest of each token's slots on its own, in slot order. */
static void attend_tile(cpu_backend *be, int32_t t0, int nq, int32_t h, float scale, float *sc)
{
    const ifl_batch *b = be->batch;
    int32_t C = be->C, D = be->D, BS = be->BS, ld = be->P + BS;
    const int32_t *table = b->block_tables[be->tok_seq[t0]];
    const float *q = be->qkv + (size_t)t0 * 3 * C + (size_t)h * D;
    int32_t n0 = be->tok_pos[t0] + 1; /* positions the first token sees */
    int32_t nblk = tile_blocks(be, t0, nq);
    if (nq == 1 && be->k->attn_scores_q1 && BS == IFL_ATTN_Q1_BS)
        for (int32_t j0 = 0; j0 < nblk; j0 += IFL_ATTN_Q1_BLOCKS) {
            const float *kt[IFL_ATTN_Q1_BLOCKS];
            int n = nblk - j0 < IFL_ATTN_Q1_BLOCKS ? (int)(nblk - j0) : IFL_ATTN_Q1_BLOCKS;
            for (int i = 0; i < n; i++)
                kt[i] = kv_k(be, table[j0 + i], be->layer, h);
            be->k->attn_scores_q1(sc + (size_t)j0 * BS, q, kt, n, D);
        }
    else
        for (int32_t j = 0; j < nblk; j++)
            be->k->attn_scores(sc + (size_t)j * BS, ld, q, 3 * C, nq,
                               kv_k(be, table[j], be->layer, h), D, BS);
    for (int i = 0; i < nq; i++) {
        be->k->scale(sc + (size_t)i * ld, scale, (size_t)(n0 + i));
        ifl_softmax_k(be->k, sc + (size_t)i * ld, n0 + i);
    }
    float *out = be->att + (size_t)t0 * C + (size_t)h * D;
    for (int i = 0; i < nq; i++)
        memset(out + (size_t)i * C, 0, (size_t)D * sizeof *out);
    for (int32_t j = 0; j < nblk; j++) {
        const float *vb = kv_v(be, table[j], be->layer, h);
        int32_t left = n0 - j * BS; /* slots of this block the first token sees */
        int32_t common = left < 0 ? 0 : left < BS ? left : BS;
        if (common)
            be->k->attn_values(out, C, sc + (size_t)j * BS, ld, nq, vb, common, D);
        for (int i = 0; i < nq; i++) {
            int32_t cnt = left + i < BS ? left + i : BS;
            if (cnt > common)
                be->k->attn_values(out + (size_t)i * C, C, sc + (size_t)i * ld + j * BS + common,
                                   ld, 1, vb + (size_t)common * D, cnt - common, D);
        }
    }
}

/* Toward L2: the keys and values of the first ATTN_PREFETCH_BLOCKS blocks that item's tokens
 * see, for the item a thread does next while it does this one. A decode step's items each read a
 * few 4 KiB blocks scattered over the pool, too short for the hardware's prefetchers, and one
 * core's demand loads alone kept attention at about 12 GB/s. Into L2, not L1 (locality 2):
 * prefetched into L1 they evicted the current item's lines and made it slower. Measured (bench
 * --engine --batches 64, bf16, 2 threads, alternated): attention 15.9-16.3 -> 13.8-14.4 ms a
 * step at 128 steps, 6.1-6.2 -> 5.1-5.8 at 32. */
enum { ATTN_PREFETCH_BLOCKS = 16 };
static void prefetch_item(const cpu_backend *be, int32_t item)
{
    const ifl_batch *b = be->batch;
    int32_t i = item / be->H, h = item % be->H, t0 = be->tile_tok[i];
    int32_t nblk = tile_blocks(be, t0, (int)tile_len(be, b, i));
    nblk = nblk < ATTN_PREFETCH_BLOCKS ? nblk : ATTN_PREFETCH_BLOCKS;
    const int32_t *table = b->block_tables[be->tok_seq[t0]];
    size_t bytes = (size_t)be->D * (size_t)be->BS * sizeof(float);
    for (int32_t j = 0; j < nblk; j++) {
        const char *kb = (const char *)kv_k(be, table[j], be->layer, h);
        const char *vb = (const char *)kv_v(be, table[j], be->layer, h);
        for (size_t off = 0; off < bytes; off += 64) {
            __builtin_prefetch(kb + off, 0, 2);
            __builtin_prefetch(vb + off, 0, 2);
        }
    }
}

/* One (tile, head) pair per item (tile * H + head): each share walks its own range of adjacent
 * items (adjacent heads: side by side in a KV block), then takes from others' (work_ranges.h),
 * claiming its next item before it starts on the current one (prefetch_item). Against items dealt
 * one at a time from a shared counter, bf16, 2 threads, alternated: batch 1, 0.35-0.39 ms a step
 * against 0.41-0.53 (6 runs); batch 64, 7.0-8.0 against 10.4-11.6 (4 runs); docs/perf.md. */
static void task_attention(void *ctx, int ith, int nth)
{
    (void)nth;
    cpu_backend *be = ctx;
    const ifl_config *c = &be->base.model->cfg;
    float scale = c->scale_attn_weights ? 1.0f / sqrtf((float)be->D) : 1.0f;
    if (c->scale_attn_by_inverse_layer_idx)
        scale /= (float)(be->layer + 1);
    float *sc = be->scores + (size_t)ith * IFL_ATTN_TILE * ((size_t)be->P + (size_t)be->BS);
    int32_t H = be->H;
    int32_t item = ifl_work_ranges_claim(&be->att_items, ith);
    while (item >= 0) {
        int32_t next = ifl_work_ranges_claim(&be->att_items, ith);
        if (next >= 0)
            prefetch_item(be, next);
        int32_t i = item / H;
        attend_tile(be, be->tile_tok[i], (int)tile_len(be, be->batch, i), item % H, scale, sc);
        item = next;
    }
}

/* Every page of [p, p + bytes) written once, the range shared across the pool's threads (params
 * prefault): the KV pool and the activations faulted in (and zeroed by the kernel) when the
 * backend is made, not by the first steps that reach each block. Measured (bench --turns, 2
 * cores): the run with the prefix cache, which went first, paid 5-10% of its time to first token
 * in page faults that the run without it, on the same pool, did not. */
typedef struct {
    char *p;
    size_t bytes;
} touch_ctx;

static void task_touch(void *ctx, int ith, int nth)
{
    const touch_ctx *t = ctx;
    const size_t page = 4096; /* the smallest page: one write in each reaches every page */
    int32_t p0, p1;
    ifl_kernel_split((int32_t)((t->bytes + page - 1) / page), ith, nth, 1, &p0, &p1);
    for (int32_t i = p0; i < p1; i++)
        ((volatile char *)t->p)[(size_t)i * page] = 0;
}

/* ---- the step -------------------------------------------------------------------------------- */

static void run_layernorm(cpu_backend *be, float *out, const float *in, const float *w,
                          const float *bias, int32_t n_rows, const int32_t *rows)
{
    be->ln_out = out;
    be->ln_in = in;
    be->ln_w = w;
    be->ln_b = bias;
    be->n_rows = n_rows;
    be->ln_rows = rows;
    if (n_rows <= 4)
        task_layernorm(be, 0, 1);
    else
        ifl_threadpool_run(be->tp, task_layernorm, be);
}

static void run_matmul(cpu_backend *be, float *y, const float *x, int32_t M, const ifl_mat *W,
                       int w_is_nk, const float *bias, int accumulate, ifl_act act)
{
    be->mm = (ifl_matmul_args){
        .y = y,
        .x = x,
        .M = M,
        .W = W,
        .w_is_nk = w_is_nk,
        .bias = bias,
        .accumulate = accumulate,
        .act = act,
        .scratch = be->mm_scratch,
        .scratch_floats = be->mm_floats,
        .max_k = be->mm_max_k,
        .max_n = be->mm_max_n,
        .max_m = be->mm_max_m,
        .gemv_max_rows = be->gemv_rows[W->dtype],
        .blas = be->base.params.sgemm_above > 0,
        .k = be->k,
        .n_threads = ifl_threadpool_size(be->tp),
    };
    if (ifl_matmul_plan(&be->mm)) /* adopt_weights guarantees the layouts */
        abort();
    ifl_threadpool_run(be->tp, task_matmul, be);
    if (ifl_matmul_needs_finish(&be->mm))
        ifl_threadpool_run(be->tp, task_matmul_finish, be);
}

/* logits (n, V) = xf (n, C) lm_head^T, in products of up to mm_max_m rows (the rows the scratch
 * was sized for; at least max_seqs, so a step of one row per run is one product). Each row's dot
 * products are its own, so the split changes no bit. */
static void run_lm_head(cpu_backend *be, float *logits, int32_t n)
{
    for (int32_t r0 = 0; r0 < n; r0 += be->mm_max_m) {
        int32_t m = n - r0 < be->mm_max_m ? n - r0 : be->mm_max_m;
        run_matmul(be, logits + (size_t)r0 * (size_t)be->V, be->xf + (size_t)r0 * (size_t)be->C, m,
                   &be->lm_head, 1, NULL, 0, IFL_ACT_NONE);
    }
}

static int cpu_step(ifl_backend *base, const ifl_batch *b, float *logits, ifl_err *err)
{
    cpu_backend *be = (cpu_backend *)base;
    const ifl_model *m = base->model;
    if (ifl_batch_validate(base, b, err))
        return -1;
    int32_t T = b->n_tokens, S = b->n_seqs, n_out = 0;
    for (int32_t s = 0; s < S; s++) {
        for (int32_t i = b->run_start[s]; i < b->run_start[s + 1]; i++) {
            be->tok_seq[i] = s;
            be->tok_pos[i] = b->pos0[s] + (i - b->run_start[s]);
        }
        int32_t k = b->n_rows ? b->n_rows[s] : 1;
        for (int32_t i = b->run_start[s + 1] - k; i < b->run_start[s + 1]; i++)
            be->row_tok[n_out++] = i;
    }
    be->n_out_rows = n_out;
    be->n_tiles = attention_tiles(be, b);
    be->batch = b;
    ifl_act act = m->cfg.gelu == IFL_GELU_ERF ? IFL_ACT_GELU_ERF : IFL_ACT_GELU_TANH;

    double t = be->profile ? ifl_now_s() : 0;
#define PHASE(ph)                                                                                  \
    do {                                                                                           \
        if (be->profile) {                                                                         \
            double now_ = ifl_now_s();                                                             \
            be->prof[ph] += now_ - t;                                                              \
            t = now_;                                                                              \
        }                                                                                          \
    } while (0)
    ifl_threadpool_run(be->tp, task_embed, be);
    PHASE(PH_EMBED);
    for (int32_t l = 0; l < be->L; l++) {
        const ifl_layer *ly = &be->layers[l];
        be->layer = l;
        run_layernorm(be, be->xn, be->x, ly->ln1_w, ly->ln1_b, T, NULL);
        PHASE(PH_LN);
        run_matmul(be, be->qkv, be->xn, T, &ly->qkv_w, 0, ly->qkv_b, 0, IFL_ACT_NONE);
        PHASE(PH_QKV);
        ifl_threadpool_run(be->tp, task_kv_write, be);
        PHASE(PH_KV);
        ifl_work_ranges_reset(&be->att_items, be->n_tiles * be->H);
        ifl_threadpool_run(be->tp, task_attention, be);
        PHASE(PH_ATTN);
        run_matmul(be, be->x, be->att, T, &ly->attn_proj_w, 0, ly->attn_proj_b, 1, IFL_ACT_NONE);
        PHASE(PH_PROJ);
        run_layernorm(be, be->xn, be->x, ly->ln2_w, ly->ln2_b, T, NULL);
        PHASE(PH_LN);
        run_matmul(be, be->ff, be->xn, T, &ly->fc_w, 0, ly->fc_b, 0, act);
        PHASE(PH_FC);
        run_matmul(be, be->x, be->ff, T, &ly->mlp_proj_w, 0, ly->mlp_proj_b, 1, IFL_ACT_NONE);
        PHASE(PH_MPROJ);
    }
    if (n_out > 0) { /* a step of prefill chunks that end no prompt needs no lm_head at all */
        run_layernorm(be, be->xf, be->x, m->lnf_w, m->lnf_b, n_out, be->row_tok);
        PHASE(PH_LN);
        run_lm_head(be, logits, n_out);
        PHASE(PH_HEAD);
    }
#undef PHASE
    be->prof_steps++;
    be->batch = NULL;
    return 0;
}

static void cpu_free(ifl_backend *base)
{
    cpu_backend *be = (cpu_backend *)base;
    if (!be)
        return;
    for (int i = 0; i < be->n_samplers; i++)
        ifl_sampler_free(&be->samplers[i]);
    free(be->samplers);
    ifl_work_ranges_free(&be->att_items);
    if (be->profile && be->prof_steps) {
        double total = 0;
        for (int i = 0; i < PH_COUNT; i++)
            total += be->prof[i];
        fprintf(stderr, "cpu backend profile: %lld steps, %.3f ms/step\n",
                (long long)be->prof_steps, total * 1e3 / (double)be->prof_steps);
        for (int i = 0; i < PH_COUNT; i++)
            fprintf(stderr, "  %-10s %8.3f ms/step %5.1f%%\n", phase_names[i],
                    be->prof[i] * 1e3 / (double)be->prof_steps, 100.0 * be->prof[i] / total);
    }
    if (be->tp != be->base.params.pool)
        ifl_threadpool_free(be->tp);
    if (be->packed)
        munmap(be->packed, be->packed_bytes);
    free(be->layers);
    if (be->kv)
        munmap(be->kv, be->kv_bytes);
    if (be->arena)
        munmap(be->arena, be->arena_bytes);
    free(be);
}

/* Which kernels the step runs, into buf. */
static void kernels_desc(const cpu_backend *be, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s", ifl_cpu_kernels_desc(be->k)); /* the runtime names the isa */
#ifdef INFLIGHT_HAVE_BLAS
    if (be->base.params.sgemm_above > 0 && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", OpenBLAS sgemm above %d rows",
                 be->base.params.sgemm_above);
#else
    (void)n;
#endif
}

static void cpu_describe(const ifl_backend *base, char *buf, int cap)
{
    const cpu_backend *be = (const cpu_backend *)base;
    char mm[128];
    kernels_desc(be, mm, sizeof mm);
    snprintf(buf, (size_t)cap,
             "cpu: %d thread%s, %s, weights %s, KV pool %d blocks x %d tokens (%.0f MiB%s)",
             be->nth, be->nth == 1 ? "" : "s", mm, ifl_model_dtype_name(base->model),
             base->params.kv_blocks, base->params.kv_block_size,
             (double)be->kv_bytes / (1024.0 * 1024.0), base->params.prefault ? ", prefaulted" : "");
}

/* The matrices in the panel layouts the decode kernels read (tensor.h): taken as they are when the
 * model was loaded with cpu_layout, else repacked once into memory of the backend's own. */
static int adopt_weights(cpu_backend *be, const ifl_model *m, ifl_err *err)
{
    be->layers = malloc((size_t)be->L * sizeof *be->layers);
    if (!be->layers)
        return ifl_err_set(err, "out of memory");
    memcpy(be->layers, m->layers, (size_t)be->L * sizeof *be->layers);
    be->lm_head = m->lm_head;
    ifl_mat *mats[4 * 512 + 1];
    ifl_layout want[4 * 512 + 1];
    int n = 0;
    for (int32_t l = 0; l < be->L; l++) {
        ifl_layer *ly = &be->layers[l];
        ifl_mat *kn[4] = {&ly->qkv_w, &ly->attn_proj_w, &ly->fc_w, &ly->mlp_proj_w};
        for (int i = 0; i < 4; i++) {
            mats[n] = kn[i];
            want[n++] = IFL_LAYOUT_KN8;
        }
    }
    mats[n] = &be->lm_head;
    want[n++] = IFL_LAYOUT_NK4;
    size_t bytes = 0;
    for (int i = 0; i < n; i++)
        if (mats[i]->layout != want[i])
            bytes += (ifl_layout_bytes(want[i], mats[i]->dtype, mats[i]->rows, mats[i]->cols) +
                      63) &
                     ~(size_t)63;
    if (!bytes)
        return 0;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return ifl_err_set(err,
                           "cannot allocate %.1f MiB to repack the weights (load the model "
                           "with cpu_layout to avoid the copy)",
                           (double)bytes / (1 << 20));
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    be->packed = p;
    be->packed_bytes = bytes;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (mats[i]->layout == want[i])
            continue;
        if (mats[i]->dtype == IFL_DTYPE_Q8) /* the model's loader makes q8 only in its tiles */
            return ifl_err_set(err, "q8 weights not in the CPU's tiles: load with cpu_layout");
        char *dst = (char *)p + off;
        ifl_mat_repack(dst, want[i], mats[i]->dtype, mats[i], NULL, NULL);
        if (mats[i]->layout == IFL_LAYOUT_ROWS)
            mats[i]->rows_data = mats[i]->data; /* still there: sgemm may use it */
        off += (ifl_layout_bytes(want[i], mats[i]->dtype, mats[i]->rows, mats[i]->cols) + 63) &
               ~(size_t)63;
        mats[i]->layout = want[i];
        mats[i]->data = dst;
    }
    return 0;
}

static const ifl_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .step = cpu_step,
    .sample = ifl_cpu_sample,
    .score = ifl_cpu_score,
    .copy_blocks = ifl_cpu_copy_blocks,
    .describe = cpu_describe,
};

ifl_backend *ifl_cpu_backend_new(const ifl_model *m, const ifl_backend_params *params, ifl_err *err)
{
    cpu_backend *be =
        ifl_backend_alloc(sizeof *be, &cpu_ops, m, params, 4, IFL_DEFAULT_KV_MEM_MB_CPU, err);
    if (!be)
        return NULL;
    const ifl_backend_params *p = &be->base.params;
    const ifl_config *c = &m->cfg;
    be->L = c->n_layer;
    be->H = c->n_head;
    be->C = c->n_embd;
    be->D = c->n_embd / c->n_head;
    be->F = ifl_config_n_inner(c);
    be->V = c->n_vocab;
    be->P = c->n_ctx;
    be->BS = p->kv_block_size;
    be->nth = p->pool            ? ifl_threadpool_size(p->pool)
              : p->n_threads > 0 ? p->n_threads
                                 : ifl_n_cores();
    const char *prof = getenv("IFL_PROFILE");
    be->profile = prof && *prof && strcmp(prof, "0");
    be->k = ifl_cpu_kernels_get(ifl_isa_current());
    if (!be->k) {
        ifl_err_set(err, "the %s kernels are not in this build", ifl_isa_name(ifl_isa_current()));
        goto fail;
    }
    for (int d = 0; d < IFL_DTYPE_COUNT; d++)
        be->gemv_rows[d] = p->sgemm_above > 0 ? p->sgemm_above
                                              : ifl_matmul_default_gemv_rows(be->k, (ifl_dtype)d);

#ifdef INFLIGHT_HAVE_BLAS
    openblas_set_num_threads(1); /* our pool provides the parallelism */
#endif
    if (adopt_weights(be, m, err))
        goto fail;
    be->block_floats = (size_t)be->L * 2 * be->H * be->D * be->BS;
    be->kv_bytes = (size_t)p->kv_blocks * be->block_floats * sizeof(float);
    void *kv = mmap(NULL, be->kv_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (kv == MAP_FAILED) {
        ifl_err_set(err, "cannot allocate the KV pool: %d blocks, %.1f MiB", p->kv_blocks,
                    (double)be->kv_bytes / (1024.0 * 1024.0));
        goto fail;
    }
#ifdef MADV_HUGEPAGE
    madvise(kv, be->kv_bytes, MADV_HUGEPAGE); /* the K writes stride through it: fewer TLB misses */
#endif
    be->kv = kv;

    size_t T = (size_t)p->max_tokens, C = (size_t)be->C;
    be->mm_max_k = be->F > be->C ? be->F : be->C;
    be->mm_max_n = be->F > 3 * be->C ? be->F : 3 * be->C;
    be->mm_max_m = 1;
    for (int d = 0; d < IFL_DTYPE_COUNT; d++) /* q8's one path needs none of these partials */
        if (d != IFL_DTYPE_Q8 && be->gemv_rows[d] > be->mm_max_m)
            be->mm_max_m = be->gemv_rows[d];
    if (be->mm_max_m > p->max_tokens)
        be->mm_max_m = p->max_tokens;
    if (be->mm_max_m < p->max_seqs) /* the lm_head's dot products take every sequence's row */
        be->mm_max_m = p->max_seqs;
    if (m->wte.dtype == IFL_DTYPE_Q8) /* q8 keeps every row of a step's products quantized once */
        be->mm_max_m = p->max_tokens;
    be->mm_floats = ifl_matmul_scratch_floats(be->mm_max_k, be->mm_max_n, be->mm_max_m);
    size_t n_scores = (size_t)be->nth * IFL_ATTN_TILE * ((size_t)be->P + (size_t)be->BS);
    size_t floats[] = {T * C,
                       T * C,
                       T * 3 * C,
                       T * C,
                       T * (size_t)be->F,
                       T * C,
                       n_scores,
                       (size_t)be->nth * be->mm_floats};
    size_t ints = 4 * T;
    size_t total = 0;
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        total += (floats[i] + 16) * sizeof(float);
    total += ints * sizeof(int32_t) + 64;
    be->arena_bytes = (total + 63) & ~(size_t)63;
    void *arena = mmap(NULL, be->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0); /* zeroed, page-aligned */
    if (arena == MAP_FAILED) {
        ifl_err_set(err, "cannot allocate %.1f MiB of activations",
                    (double)total / (1024.0 * 1024.0));
        goto fail;
    }
#ifdef MADV_HUGEPAGE
    madvise(arena, be->arena_bytes, MADV_HUGEPAGE); /* the products' scratch is megabytes */
#endif
    be->arena = arena;
    float *f = be->arena;
    float **dst[] = {&be->x,  &be->xn, &be->qkv,    &be->att,
                     &be->ff, &be->xf, &be->scores, &be->mm_scratch};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        *dst[i] = f;
        f += (floats[i] + 15) / 16 * 16 + 16;
    }
    int32_t *ip = (int32_t *)f;
    be->tok_seq = ip;
    be->tok_pos = ip + T;
    be->row_tok = ip + 2 * T;
    be->tile_tok = ip + 3 * T;

    be->tp = p->pool ? p->pool : ifl_threadpool_new(be->nth);
    if (!be->tp) {
        ifl_err_set(err, "cannot start %d threads", be->nth);
        goto fail;
    }
    if (ifl_work_ranges_init(&be->att_items, ifl_threadpool_size(be->tp))) {
        ifl_err_set(err, "out of memory for the attention's work ranges");
        goto fail;
    }
    int n_samplers = ifl_threadpool_size(be->tp);
    be->samplers = calloc((size_t)n_samplers, sizeof *be->samplers);
    if (!be->samplers) {
        ifl_err_set(err, "out of memory for %d samplers", n_samplers);
        goto fail;
    }
    be->n_samplers = n_samplers;
    for (int i = 0; i < be->n_samplers; i++)
        if (ifl_sampler_init(&be->samplers[i], m->cfg.n_vocab, err))
            goto fail;
    if (p->prefault) {
        touch_ctx kv_touch = {(char *)be->kv, be->kv_bytes};
        touch_ctx arena_touch = {be->arena, be->arena_bytes};
        ifl_threadpool_run(be->tp, task_touch, &kv_touch);
        ifl_threadpool_run(be->tp, task_touch, &arena_touch);
    }
    return &be->base;
fail:
    cpu_free(&be->base);
    return NULL;
}
