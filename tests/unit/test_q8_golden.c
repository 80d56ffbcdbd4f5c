/* test_q8_golden.c: how close 8-bit weights come to the float model, on the golden fixtures'
 * models and prompts (golden_case.h), against the bf16 model on the same inputs.
 *
 * For each case stored in f32 or f16 (a bf16-stored model loses nothing in bf16, so its bf16
 * error is only float rounding and no measure of the format), each prompt with its golden greedy
 * continuation is run teacher-forced in one prefill that returns every position's logits, three
 * times: the model as stored (the reference: the fixtures' float64 logits agree with it to 1e-4,
 * test_golden), converted to bf16, and quantized to q8. Printed and checked:
 *   - the relative L2 error of all positions' logits, bf16's and q8's, and their ratio, over all
 *     cases together and per case;
 *   - where bf16's top-2 margin exceeds 0.05, the share of positions whose q8 greedy token is
 *     bf16's (>= 95%).
 * The ratio is bounded by what 8 bits in blocks of 32 can do (docs/architecture.md: q8's
 * per-weight error is ~3x bf16's on Gaussian weights), and checked <= Q8_RATIO_MAX.
 * IFL_TEST_QUICK=1 (aarch64 under qemu, ASan/UBSan): the same cases, prompts and prefills, but
 * logits only from each prompt's last position on (the greedy continuation's 33 rows, where the
 * agreement is counted): the lm_head over 50257 tokens for every position (1483, 990 of them
 * ctx1024's prompt) made this test 179 s of the aarch64 stage and 59 s under ASan (2026-12-07). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "golden_case.h"
#include "model.h"
#include "testutil.h"

#define Q8_RATIO_MAX 4.0
#define MARGIN 0.05
#define CHUNK 256

/* The logits of positions from..n-1 of seq (n tokens) through model dir loaded with opts: out
 * (n - from, V). */
static int all_logits(const char *dir, const ifl_model_opts *opts, const int32_t *seq, int32_t n,
                      int32_t from, float *out)
{
    ifl_err err;
    ifl_model m;
    if (ifl_model_load(&m, dir, opts, &err)) {
        fprintf(stderr, "FAIL %s: %s\n", dir, err.msg);
        return -1;
    }
    int32_t nblk = (m.cfg.n_ctx + 15) / 16;
    ifl_backend_params bp = {.max_seqs = 1, .max_tokens = CHUNK, .kv_blocks = nblk,
                             .kv_block_size = 16};
    ifl_backend *be = ifl_cpu_backend_new(&m, &bp, &err);
    int rc = be ? 0 : -1;
    int32_t *table = malloc((size_t)nblk * sizeof *table);
    for (int32_t i = 0; i < nblk; i++)
        table[i] = i;
    const int32_t *tabs[1] = {table};
    for (int32_t at = 0; be && at < n && !rc; at += CHUNK) {
        int32_t len = n - at < CHUNK ? n - at : CHUNK;
        /* the chunk's last rows: those at or after from */
        int32_t want = at + len - (from > at ? from : at);
        int32_t run_start[2] = {0, len}, pos0[1] = {at}, nb[1] = {nblk},
                rows[1] = {want > 0 ? want : 0};
        ifl_batch b = {.n_seqs = 1,
                       .n_tokens = len,
                       .tokens = seq + at,
                       .run_start = run_start,
                       .pos0 = pos0,
                       .block_tables = tabs,
                       .n_blocks = nb,
                       .n_rows = rows};
        /* (no rows: the chunk only fills the KV cache, nothing is written to out) */
        size_t row0 = rows[0] > 0 ? (size_t)(at + len - rows[0] - from) : 0;
        rc = ifl_backend_step(be, &b, out + row0 * m.cfg.n_vocab, &err);
    }
    if (rc)
        fprintf(stderr, "FAIL %s: %s\n", dir, err.msg);
    free(table);
    if (be)
        ifl_backend_free(be);
    ifl_model_free(&m);
    return rc;
}

static int32_t argmax(const float *x, int32_t n, float *margin)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    float second = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (i != b && x[i] > second)
            second = x[i];
    *margin = x[b] - second;
    return b;
}

typedef struct {
    double e_bf16, e_q8, ref; /* sums of squares */
    int compared, agree;      /* positions with bf16's margin above MARGIN, and q8 agreeing */
} tally;

static int run_case(const cJSON *c, const char *tmp, tally *all)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    char dir[4200];
    ifl_dtype stored;
    if (golden_make_model(c, tmp, dir, sizeof dir, &stored))
        return 1;
    if (stored == IFL_DTYPE_BF16) {
        printf("%-16s stored in bf16: not a measure of bf16's error, skipped\n", name);
        return 0;
    }
    const int32_t V = 50257;
    tally t = {0};
    int failures = 0;
    const cJSON *prompts = cJSON_GetObjectItem(c, "prompts");
    for (int p = 0; p < cJSON_GetArraySize(prompts) && !failures; p++) {
        const cJSON *pr = cJSON_GetArrayItem(prompts, p);
        id_list prompt = json_ids(cJSON_GetObjectItem(pr, "ids"));
        id_list cont = json_ids(cJSON_GetObjectItem(pr, "greedy"));
        int32_t n = prompt.n + cont.n;
        /* the first position compared: every one, or under IFL_TEST_QUICK the prompt's last */
        int32_t from = test_quick() ? prompt.n - 1 : 0, nr = n - from;
        int32_t *seq = malloc((size_t)n * sizeof *seq);
        memcpy(seq, prompt.ids, (size_t)prompt.n * sizeof *seq);
        memcpy(seq + prompt.n, cont.ids, (size_t)cont.n * sizeof *seq);
        float *ref = malloc((size_t)nr * V * sizeof *ref),
              *bf = malloc((size_t)nr * V * sizeof *bf), *q8 = malloc((size_t)nr * V * sizeof *q8);
        ifl_model_opts o_bf16 = {.convert = 1, .dtype = IFL_DTYPE_BF16, .cpu_layout = 1};
        ifl_model_opts o_q8 = {.convert = 1, .dtype = IFL_DTYPE_Q8, .cpu_layout = 1};
        if (all_logits(dir, NULL, seq, n, from, ref) ||
            all_logits(dir, &o_bf16, seq, n, from, bf) ||
            all_logits(dir, &o_q8, seq, n, from, q8)) {
            failures++;
        } else {
            for (size_t i = 0; i < (size_t)nr * V; i++) {
                double r = ref[i], db = bf[i] - r, dq = q8[i] - r;
                t.ref += r * r;
                t.e_bf16 += db * db;
                t.e_q8 += dq * dq;
            }
            /* greedy tokens from the prompt's last position on */
            for (int32_t pos = prompt.n - 1; pos < n; pos++) {
                float mb, mq;
                int32_t tb = argmax(bf + (size_t)(pos - from) * V, V, &mb);
                int32_t tq = argmax(q8 + (size_t)(pos - from) * V, V, &mq);
                if (mb > MARGIN) {
                    t.compared++;
                    t.agree += tb == tq;
                }
            }
        }
        free(seq);
        free(ref);
        free(bf);
        free(q8);
        free(prompt.ids);
        free(cont.ids);
    }
    if (failures)
        return failures;
    double rb = sqrt(t.e_bf16 / t.ref), rq = sqrt(t.e_q8 / t.ref);
    printf("%-16s (%s): logits rel L2 vs the stored model: bf16 %.3e, q8 %.3e (%.2fx); greedy "
           "agrees with bf16 at %d of %d positions with margin > %.2f\n",
           name, ifl_dtype_name(stored), rb, rq, rq / rb, t.agree, t.compared, MARGIN);
    all->e_bf16 += t.e_bf16;
    all->e_q8 += t.e_q8;
    all->ref += t.ref;
    all->compared += t.compared;
    all->agree += t.agree;
    return 0;
}

int main(int argc, char **argv)
{
    test_select_isa("test_q8_golden");
    if (argc != 2) {
        fprintf(stderr, "usage: test_q8_golden FIXTURE_DIR\n");
        return 2;
    }
    cJSON *root;
    const cJSON *cases = golden_cases(argv[1], &root);
    if (!cases)
        return 1;
    char tmp[4096];
    test_tmpdir(tmp, sizeof tmp, "q8golden");
    tally all = {0};
    for (int i = 0; i < cJSON_GetArraySize(cases); i++)
        test_failures += run_case(cJSON_GetArrayItem(cases, i), tmp, &all);
    test_rmdir(tmp);
    cJSON_Delete(root);
    if (all.ref > 0) {
        double rb = sqrt(all.e_bf16 / all.ref), rq = sqrt(all.e_q8 / all.ref);
        printf("all cases: logits rel L2 bf16 %.3e, q8 %.3e: q8/bf16 %.2f (checked <= %.1f); greedy "
               "agreement %d of %d = %.1f%% (checked >= 95%%)\n",
               rb, rq, rq / rb, Q8_RATIO_MAX, all.agree, all.compared,
               100.0 * all.agree / (all.compared ? all.compared : 1));
        CHECKF(rq / rb <= Q8_RATIO_MAX, "q8's error %.3g is %.2fx bf16's %.3g", rq, rq / rb, rb);
        CHECKF(all.compared > 0 && all.agree >= 0.95 * all.compared, "greedy agreement %d of %d",
               all.agree, all.compared);
    } else {
        CHECKF(0, "no case measured");
    }
    return test_finish("test_q8_golden");
}
