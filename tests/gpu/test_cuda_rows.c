/* test_cuda_rows.c: the CUDA backend's rows of logits (ifl_batch.n_rows), copy_blocks and
 * step_sample with a run that asks no row, against the CPU backend on a small random f16 GPT-2
 * (test_cuda_backend.c's model shape and its f16 bound: relative L2 per row <= 5e-3):
 *   1. one batch of runs asking every row of a prompt, none, and the last 4: each row against the
 *      CPU's; then a decode of each (the run that asked none wrote its KV)
 *   2. a sequence forked by copy_blocks decodes as the CPU's fork does
 *   3. step_sample, greedy, with an inactive run of no row: -1 there, and each active run's token
 *      is the argmax of the same step's rows (the eager path gathers only asked-for rows)
 * A separate file from test_cuda_backend.c, which is long enough. Exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_backend.h"
#include "make_model.h"
#include "model.h"
#include "rng.h"
#include "testutil.h"

#define BS 16
#define SEQ_BLOCKS 8 /* 128 positions */
#define NTAB 8
#define TOL 5e-3

static int32_t V;
static int32_t tables[NTAB][SEQ_BLOCKS];
static int32_t toks[256];

typedef struct {
    int n;
    int32_t tokens[256], run_start[5], pos0[4], nblk[4], rows[4];
    const int32_t *tabs[4];
    int use_rows;
} batch_t;

static void add_run(batch_t *bt, int32_t from, int32_t len, int32_t pos0, int tab, int32_t rows)
{
    int32_t at = bt->n ? bt->run_start[bt->n] : 0;
    bt->run_start[bt->n] = at;
    memcpy(bt->tokens + at, toks + from, (size_t)len * sizeof(int32_t));
    bt->pos0[bt->n] = pos0;
    bt->tabs[bt->n] = tables[tab];
    bt->nblk[bt->n] = SEQ_BLOCKS;
    bt->rows[bt->n] = rows;
    bt->use_rows |= rows >= 0;
    bt->n++;
    bt->run_start[bt->n] = at + len;
}

static ifl_batch batch_of(const batch_t *bt)
{
    return (ifl_batch){.n_seqs = bt->n,
                       .n_tokens = bt->run_start[bt->n],
                       .tokens = bt->tokens,
                       .run_start = bt->run_start,
                       .pos0 = bt->pos0,
                       .block_tables = bt->tabs,
                       .n_blocks = bt->nblk,
                       .n_rows = bt->use_rows ? bt->rows : NULL};
}

/* The same batch on both backends; the rows compared. */
static void both(ifl_backend *cpu, ifl_backend *gpu, const batch_t *bt, float *a, float *b,
                 const char *what)
{
    ifl_batch bb = batch_of(bt);
    ifl_err err;
    if (ifl_backend_step(cpu, &bb, a, &err) || ifl_backend_step(gpu, &bb, b, &err)) {
        fprintf(stderr, "FAIL: %s: %s\n", what, err.msg);
        test_failures++;
        return;
    }
    int32_t n = ifl_batch_rows(&bb);
    double worst = 0;
    for (int32_t r = 0; r < n; r++)
        worst = fmax(worst, rel_l2(b + (size_t)r * V, a + (size_t)r * V, (size_t)V));
    printf("   %s: %d rows, relative L2 worst %.3g (bound %.0e)\n", what, n, worst, TOL);
    CHECKF(worst <= TOL, "%s: relative L2 %.3g", what, worst);
}

static void test_rows(ifl_backend *cpu, ifl_backend *gpu, float *a, float *b)
{
    batch_t bt = {0}, dec = {0};
    add_run(&bt, 0, 30, 0, 0, 30);
    add_run(&bt, 40, 12, 0, 1, 0);
    add_run(&bt, 60, 20, 0, 2, 4);
    both(cpu, gpu, &bt, a, b, "1. rows 30, 0, 4");
    static const int32_t lens[3] = {30, 12, 20};
    for (int r = 0; r < 3; r++)
        add_run(&dec, 100 + r, 1, lens[r], r, -1);
    both(cpu, gpu, &dec, a, b, "1. a decode of each after it");
}

static void test_fork(ifl_backend *cpu, ifl_backend *gpu, float *a, float *b)
{
    batch_t pre = {0}, stale = {0}, dec = {0};
    add_run(&pre, 0, 20, 0, 3, 1);
    add_run(&stale, 80, 30, 0, 4, 1);
    both(cpu, gpu, &pre, a, b, "2. prefill");
    both(cpu, gpu, &stale, a, b, "2. another sequence on the fork's blocks");
    int32_t src[2] = {tables[3][0], tables[3][1]}, dst[2] = {tables[4][0], tables[4][1]};
    ifl_err err;
    CHECKF(!ifl_backend_copy_blocks(cpu, src, dst, 2, &err), "%s", err.msg);
    CHECKF(!ifl_backend_copy_blocks(gpu, src, dst, 2, &err), "%s", err.msg);
    add_run(&dec, 120, 1, 20, 3, -1);
    add_run(&dec, 120, 1, 20, 4, -1);
    both(cpu, gpu, &dec, a, b, "2. decode of the original and of the fork");
    CHECKF(rel_l2(b + V, b, (size_t)V) <= TOL, "2. the GPU's fork decodes differently (%.3g)",
           rel_l2(b + V, b, (size_t)V));
}

static void test_sample(ifl_backend *gpu, ifl_sampler *smp, float *b)
{
    batch_t bt = {0};
    add_run(&bt, 0, 9, 0, 5, 1);
    add_run(&bt, 10, 6, 0, 6, 0);
    add_run(&bt, 20, 5, 0, 7, 1);
    ifl_sample_req req[3];
    for (int r = 0; r < 3; r++)
        req[r] = (ifl_sample_req){.sampling = {.temperature = 0.0f, .top_p = 1.0f},
                                  .active = r != 1};
    ifl_batch bb = batch_of(&bt);
    int32_t tok[3];
    ifl_err err;
    if (ifl_backend_step(gpu, &bb, b, &err) ||
        ifl_backend_step_sample(gpu, &bb, req, tok, NULL, smp, &err)) {
        fprintf(stderr, "FAIL: 3. %s\n", err.msg);
        test_failures++;
        return;
    }
    CHECK(tok[1] == -1);
    for (int r = 0; r < 3; r += 2) {
        const float *row = b + (size_t)(r / 2) * V;
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            best = row[i] > row[best] ? i : best;
        CHECKF(tok[r] == best, "3. run %d drew %d, the row's argmax is %d", r, tok[r], best);
    }
    printf("   3. step_sample with a run of no row: tokens %d, %d, %d\n", tok[0], tok[1], tok[2]);
}

int main(void)
{
    char desc[256];
    ifl_err err;
    if (ifl_cuda_probe(desc, sizeof desc, &err)) {
        printf("test_cuda_rows: skipped: %s\n", err.msg);
        return 77;
    }
    printf("test_cuda_rows on %s\n", desc);
    for (int t = 0; t < NTAB; t++)
        for (int j = 0; j < SEQ_BLOCKS; j++)
            tables[t][j] = t * SEQ_BLOCKS + (SEQ_BLOCKS - 1 - j); /* blocks out of order */
    char dir[4096];
    test_tmpdir(dir, sizeof dir, "cuda-rows");
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.cfg.n_layer = 4;
    o.cfg.n_head = 4;
    o.cfg.n_embd = 256;
    o.cfg.n_ctx = BS * SEQ_BLOCKS;
    o.seed = 11;
    o.dtype = IFL_DTYPE_F16;
    o.vocab_dir = NULL;
    ifl_model mc, mg;
    ifl_model_opts oc = {.cpu_layout = 1}, og = {0};
    if (ifl_make_model(dir, &o, &err) || ifl_model_load(&mc, dir, &oc, &err) ||
        ifl_model_load(&mg, dir, &og, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    V = mc.cfg.n_vocab;
    ifl_rng rng;
    ifl_rng_seed(&rng, 31);
    for (int i = 0; i < 256; i++)
        toks[i] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)V);
    ifl_backend_params p = {
        .max_seqs = 4, .max_tokens = 128, .kv_block_size = BS, .kv_blocks = NTAB * SEQ_BLOCKS};
    ifl_backend *cpu = ifl_cpu_backend_new(&mc, &p, &err);
    ifl_backend *gpu = cpu ? ifl_cuda_backend_new(&mg, &p, &err) : NULL;
    ifl_sampler smp;
    if (!cpu || !gpu || ifl_sampler_init(&smp, V, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return 1;
    }
    float *a = test_xmalloc((size_t)128 * V * sizeof *a), *b = test_xmalloc((size_t)128 * V * 4);
    test_rows(cpu, gpu, a, b);
    test_fork(cpu, gpu, a, b);
    test_sample(gpu, &smp, b);
    free(a);
    free(b);
    ifl_sampler_free(&smp);
    ifl_backend_free(gpu);
    ifl_backend_free(cpu);
    ifl_model_free(&mg);
    ifl_model_free(&mc);
    test_rmdir(dir);
    return test_finish("test_cuda_rows");
}
