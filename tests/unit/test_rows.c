/* test_rows.c: the step's rows of logits (backend.h: ifl_batch.n_rows), copy_blocks, and the host
 * path of ifl_backend_step_sample with logprobs, on the CPU backend and a small random model:
 *   a. a prompt's prefill with a row per token: row j is, bit for bit, the last row of a prefill of
 *      the prompt's first j + 1 tokens alone (a row depends only on its token and what precedes it)
 *   b. a batch mixing runs that ask 0, 1 and k rows gives each run's rows as it alone would, and a
 *      run that asked none still wrote its KV (the decode after it is the same)
 *   c. n_rows NULL writes the same bytes as one row per run asked for
 *   d. copy_blocks: a sequence forked by copying its partly filled block decodes as the original
 *   e. step_sample with logprobs, some runs with several rows, one inactive with none: each
 *      drawn token and its entry are those of a scalar recomputation on the raw rows, with and
 *      without a logit_bias (the logprob stays the raw row's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "make_model.h"
#include "model.h"
#include "philox.h"
#include "rng.h"
#include "testutil.h"

#define BS 16
#define SEQ_BLOCKS 8 /* n_ctx 128 */
#define MAX_RUNS 4

static int32_t V;
static int32_t tables[2 * MAX_RUNS + 1][SEQ_BLOCKS]; /* table i: blocks i*8 .. i*8+7 */

typedef struct {
    int n;
    int32_t tokens[256], run_start[MAX_RUNS + 1], pos0[MAX_RUNS], nblk[MAX_RUNS], rows[MAX_RUNS];
    const int32_t *tabs[MAX_RUNS];
} batch_t;

/* Adds a run of len tokens at pos0 on table tab, asking for `rows` rows (-1: n_rows NULL). */
static void add_run(batch_t *bt, const int32_t *toks, int32_t len, int32_t pos0, int tab,
                    int32_t rows)
{
    int32_t at = bt->n ? bt->run_start[bt->n] : 0;
    bt->run_start[bt->n] = at;
    memcpy(bt->tokens + at, toks, (size_t)len * sizeof *toks);
    bt->pos0[bt->n] = pos0;
    bt->tabs[bt->n] = tables[tab];
    bt->nblk[bt->n] = SEQ_BLOCKS;
    bt->rows[bt->n] = rows;
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
                       .n_rows = bt->rows[0] < 0 ? NULL : bt->rows};
}

static int run(ifl_backend *be, const batch_t *bt, float *logits)
{
    ifl_batch b = batch_of(bt);
    ifl_err err;
    if (ifl_backend_step(be, &b, logits, &err)) {
        fprintf(stderr, "FAIL: step: %s\n", err.msg);
        test_failures++;
        return -1;
    }
    return 0;
}

static int same_rows(const float *a, const float *b, int32_t n)
{
    return memcmp(a, b, (size_t)n * (size_t)V * sizeof *a) == 0;
}

/* a and c */
static void prompt_rows(ifl_backend *be, const int32_t *prompt, int32_t len, float *all, float *one)
{
    batch_t bt = {0};
    add_run(&bt, prompt, len, 0, 0, len);
    if (run(be, &bt, all))
        return;
    int bad = 0;
    for (int32_t j = 0; j < len; j++) {
        batch_t solo = {0};
        add_run(&solo, prompt, j + 1, 0, 1, j % 2 ? 1 : -1); /* n_rows {1} and NULL alike */
        if (run(be, &solo, one))
            return;
        bad += !same_rows(all + (size_t)j * V, one, 1);
    }
    CHECKF(bad == 0, "%d of %d prompt rows differ from their prefix's own prefill", bad, len);
}

/* b: runs asking 0, 1 and k rows together, against each alone; then a decode of each. */
static void mixed_rows(ifl_backend *be, const int32_t *toks, float *mixed, float *solo)
{
    static const int32_t lens[3] = {10, 7, 12}, want[3] = {0, 1, 5};
    batch_t bt = {0};
    for (int r = 0; r < 3; r++)
        add_run(&bt, toks + 20 * r, lens[r], 0, 2 + r, want[r]);
    if (run(be, &bt, mixed))
        return;
    int32_t at = 0;
    for (int r = 0; r < 3; r++) {
        batch_t one = {0};
        add_run(&one, toks + 20 * r, lens[r], 0, 5 + r, want[r]);
        if (run(be, &one, solo))
            return;
        CHECKF(same_rows(mixed + (size_t)at * V, solo, want[r]), "run %d's %d rows differ", r,
               want[r]);
        at += want[r];
    }
    batch_t dec = {0}, dec_solo = {0};
    for (int r = 0; r < 3; r++) {
        add_run(&dec, toks + 70, 1, lens[r], 2 + r, -1);
        add_run(&dec_solo, toks + 70, 1, lens[r], 5 + r, 1);
    }
    if (!run(be, &dec, mixed) && !run(be, &dec_solo, solo))
        CHECKF(same_rows(mixed, solo, 3), "decodes after the mixed batch differ");
}

/* d: fork a 20-token sequence by copying its second (partly filled) block. */
static void fork_copy(ifl_backend *be, const int32_t *toks, float *a, float *b)
{
    ifl_err err;
    batch_t pre = {0}, stale = {0};
    add_run(&pre, toks, 20, 0, 0, 1);
    add_run(&stale, toks + 40, 30, 0, 1, 1); /* table 1's blocks hold something else first */
    if (run(be, &pre, a) || run(be, &stale, b))
        return;
    int32_t src[2] = {tables[0][1], tables[0][0]}, dst[2] = {tables[1][1], tables[1][0]};
    CHECKF(ifl_backend_copy_blocks(be, src, dst, 2, &err) == 0, "copy_blocks: %s", err.msg);
    int32_t bad_src = be->params.kv_blocks;
    CHECK(ifl_backend_copy_blocks(be, &bad_src, dst, 1, &err) != 0);
    batch_t da = {0}, db = {0};
    add_run(&da, toks + 60, 1, 20, 0, -1);
    add_run(&db, toks + 60, 1, 20, 1, -1);
    if (!run(be, &da, a) && !run(be, &db, b))
        CHECKF(same_rows(a, b, 1), "the forked sequence decodes differently");
}

/* e: ifl_backend_step_sample's host path with logprobs, against the raw rows recomputed. */
static void sample_lp(ifl_backend *be, ifl_sampler *smp, const int32_t *toks, float *raw,
                      float *scratch)
{
    batch_t bt = {0};
    add_run(&bt, toks, 9, 0, 0, 3);       /* active, 3 rows: drawn from the last */
    add_run(&bt, toks + 10, 6, 0, 1, 0);  /* inactive, no row */
    add_run(&bt, toks + 20, 5, 0, 2, 1);  /* active, with a logit_bias */
    add_run(&bt, toks + 30, 11, 0, 3, 2); /* active, greedy */
    if (run(be, &bt, raw))
        return;
    ifl_logit_bias bias = {.id = 7, .bias = 6.0f};
    ifl_logit_adj adj = {.bias = &bias, .n_bias = 1};
    ifl_logprob lp[4];
    ifl_sample_req req[4];
    for (int r = 0; r < 4; r++)
        req[r] = (ifl_sample_req){.sampling = {.temperature = r == 3 ? 0.0f : 0.9f, .top_p = 1.0f},
                                  .seed = 100 + (uint64_t)r,
                                  .draw = 3,
                                  .active = r != 1,
                                  .adj = r == 2 ? &adj : NULL,
                                  .lp = &lp[r],
                                  .n_top = 5};
    int32_t tok[4];
    ifl_err err;
    ifl_batch b = batch_of(&bt);
    if (ifl_backend_step_sample(be, &b, req, tok, scratch, smp, &err)) {
        fprintf(stderr, "FAIL: step_sample: %s\n", err.msg);
        test_failures++;
        return;
    }
    CHECK(tok[1] == -1);
    static const int32_t last_row[4] = {2, -1, 3, 5};
    for (int r = 0; r < 4; r++) {
        if (r == 1)
            continue;
        float *row = raw + (size_t)last_row[r] * V;
        ifl_logprob want;
        ifl_logprob_score(row, V, tok[r], 5, &want);
        CHECKF(lp[r].token == tok[r] && lp[r].logprob == want.logprob && lp[r].n_top == 5,
               "run %d: token %d logprob %g, recomputed %g", r, lp[r].token,
               (double)lp[r].logprob, (double)want.logprob);
        CHECKF(memcmp(lp[r].top, want.top, sizeof want.top[0] * 5) == 0, "run %d: top differs", r);
        ifl_sample_req plain = req[r];
        plain.lp = NULL; /* the draw itself is the same with or without logprobs */
        memcpy(scratch, row, (size_t)V * sizeof *row);
        CHECKF(ifl_backend_draw(smp, scratch, &plain) == tok[r], "run %d: drawn differently", r);
    }
    /* with the bias, the entry of token 7 is the raw row's, not the biased one's */
    float *row2 = raw + (size_t)3 * V;
    ifl_sample_req forced = req[2];
    ifl_logit_bias big = {.id = 7, .bias = 100.0f};
    ifl_logit_adj adj_big = {.bias = &big, .n_bias = 1};
    forced.adj = &adj_big;
    memcpy(scratch, row2, (size_t)V * sizeof *row2);
    ifl_logprob got, want;
    forced.lp = &got;
    CHECK(ifl_backend_draw(smp, scratch, &forced) == 7);
    ifl_logprob_score(row2, V, 7, 5, &want);
    CHECKF(got.logprob == want.logprob && got.logprob < -0.01f,
           "biased token's logprob %g, raw row's %g", (double)got.logprob, (double)want.logprob);
}

static void run_dtype(const char *dir, ifl_dtype dt)
{
    ifl_model m;
    ifl_err err;
    ifl_model_opts mo = {.convert = 1, .dtype = dt, .cpu_layout = dt == IFL_DTYPE_Q8};
    if (ifl_model_load(&m, dir, &mo, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        test_failures++;
        return;
    }
    V = m.cfg.n_vocab;
    ifl_backend_params bp = {.max_seqs = MAX_RUNS,
                             .max_tokens = 128,
                             .kv_block_size = BS,
                             .kv_blocks = (2 * MAX_RUNS + 1) * SEQ_BLOCKS};
    ifl_backend *be = ifl_cpu_backend_new(&m, &bp, &err);
    ifl_sampler smp;
    if (!be || ifl_sampler_init(&smp, V, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        test_failures++;
        return;
    }
    int32_t toks[128];
    ifl_rng rng;
    ifl_rng_seed(&rng, 5 + (uint64_t)dt);
    for (int i = 0; i < 128; i++)
        toks[i] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)V);
    float *a = test_xmalloc((size_t)128 * V * sizeof *a), *b = test_xmalloc((size_t)128 * V * 4);
    prompt_rows(be, toks, 40, a, b);
    mixed_rows(be, toks, a, b);
    fork_copy(be, toks, a, b);
    sample_lp(be, &smp, toks, a, b);
    printf("test_rows: %s weights done\n", ifl_dtype_name(dt));
    free(a);
    free(b);
    ifl_sampler_free(&smp);
    ifl_backend_free(be);
    ifl_model_free(&m);
}

int main(void)
{
    test_select_isa("test_rows");
    for (int t = 0; t <= 2 * MAX_RUNS; t++)
        for (int j = 0; j < SEQ_BLOCKS; j++)
            tables[t][j] = t * SEQ_BLOCKS + j;
    char dir[4096];
    test_tmpdir(dir, sizeof dir, "rows");
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    o.cfg.n_layer = 2;
    o.cfg.n_head = 4;
    o.cfg.n_embd = 64;
    o.cfg.n_ctx = BS * SEQ_BLOCKS;
    o.cfg.n_vocab = 1000;
    o.cfg.eos_token_id = o.cfg.bos_token_id = 999;
    o.seed = 9;
    o.vocab_dir = NULL;
    ifl_err err;
    if (ifl_make_model(dir, &o, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    for (int dt = 0; dt < IFL_DTYPE_COUNT; dt++) /* q8 too */
        run_dtype(dir, (ifl_dtype)dt);
    test_rmdir(dir);
    return test_finish("test_rows");
}
