/* test_golden.c: the forward pass against golden logits from the independent float64 reference
 * (tests/reference/gpt2_ref.py, fixtures made by tests/reference/make_fixtures.py).
 *
 * For each case of tests/fixtures/golden/manifest.json: rebuild the random model with make-model's
 * parameters, check its sha256 against the fixture (so a changed generator is reported as such),
 * load it as stored (F32, F16 or BF16), run the prompt (in chunks, so long prompts also exercise
 * chunked prefill), and require last-position logits within 1e-4 relative L2 of the reference and
 * an identical 32-token greedy continuation (IFL_TEST_QUICK: its first 2 tokens). Prints the first
 * values compared as evidence. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "generate.h"
#include "make_model.h"
#include "model.h"
#include "sha256.h"
#include "golden_case.h"
#include "testutil.h"
#include "util.h"

#define TOL 1e-4

static int collect(void *ud, int32_t id)
{
    id_list *l = ud;
    l->ids[l->n++] = id;
    return 0;
}

static int run_case(const char *fixdir, const cJSON *c, const char *tmp)
{
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    char dir[4200];
    ifl_dtype stored;
    ifl_err err;
    if (golden_make_model(c, tmp, dir, sizeof dir, &stored))
        return 1;
    ifl_model m;
    if (ifl_model_load(&m, dir, NULL, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return 1;
    }
    /* Chunks of 256 tokens: the 990-token prompt takes four prefill steps. */
    ifl_backend_params bp = {.max_seqs = 1, .max_tokens = 256};
    ifl_backend *be = ifl_cpu_backend_new(&m, &bp, &err);
    if (!be) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        ifl_model_free(&m);
        return 1;
    }
    int failures = 0;
    float *logits = malloc((size_t)m.cfg.n_vocab * sizeof *logits);
    float *golden = NULL;
    const cJSON *prompts = cJSON_GetObjectItem(c, "prompts");
    for (int p = 0; p < cJSON_GetArraySize(prompts); p++) {
        const cJSON *pr = cJSON_GetArrayItem(prompts, p);
        id_list prompt = json_ids(cJSON_GetObjectItem(pr, "ids"));
        id_list want = json_ids(cJSON_GetObjectItem(pr, "greedy"));
        /* IFL_TEST_QUICK (valgrind, qemu, ASan/UBSan): the first 2 greedy tokens, the prompt's
         * and one decode step's (each step's lm_head over 50257 tokens took ~1 s under valgrind,
         * ~1/4 of the test there with 4 tokens, 2026-12-07) */
        if (test_quick() && want.n > 2)
            want.n = 2;
        char gpath[4300];
        snprintf(gpath, sizeof gpath, "%s/%s", fixdir,
                 cJSON_GetObjectItem(pr, "logits")->valuestring);
        size_t glen;
        if (ifl_read_file(gpath, (char **)&golden, &glen, (size_t)1 << 28, &err) ||
            glen != (size_t)m.cfg.n_vocab * 4) {
            fprintf(stderr, "FAIL %s: golden logits %s unreadable or of the wrong size\n", name,
                    gpath);
            failures++;
            free(golden);
            golden = NULL;
            free(prompt.ids);
            free(want.ids);
            continue;
        }
        id_list got = {malloc(64 * sizeof(int32_t)), 0};
        ifl_generate_opts go = {.max_new = want.n,
                                .sampling = {.temperature = 0, .top_p = 1},
                                .ignore_eos = 1,
                                .eos = -1,
                                .on_token = collect,
                                .ud = &got,
                                .logits_out = logits};
        ifl_generate_stats st;
        if (ifl_generate(be, prompt.ids, prompt.n, &go, &st, &err)) {
            fprintf(stderr, "FAIL %s: %s\n", name, err.msg);
            failures++;
        } else {
            double rel = rel_l2(logits, golden, (size_t)m.cfg.n_vocab);
            int same = got.n == want.n && !memcmp(got.ids, want.ids, (size_t)want.n * 4);
            printf("%-16s prompt %4d tokens (%s): rel L2 %.2e; logits[0..2] %.6f %.6f %.6f vs "
                   "%.6f %.6f %.6f; greedy %d %s\n",
                   name, prompt.n, ifl_model_dtype_name(&m), rel, logits[0], logits[1], logits[2],
                   golden[0], golden[1], golden[2], want.n, same ? "identical" : "DIFFER");
            if (rel > TOL) {
                fprintf(stderr, "FAIL %s prompt %d: relative L2 %.3g > %g\n", name, p, rel, TOL);
                failures++;
            }
            if (!same) {
                fprintf(stderr, "FAIL %s prompt %d: greedy continuation differs:\n  got ", name, p);
                for (int32_t i = 0; i < got.n; i++)
                    fprintf(stderr, "%d ", got.ids[i]);
                fprintf(stderr, "\n  want ");
                for (int32_t i = 0; i < want.n; i++)
                    fprintf(stderr, "%d ", want.ids[i]);
                fprintf(stderr, "\n");
                failures++;
            }
        }
        free(got.ids);
        free(golden);
        golden = NULL;
        free(prompt.ids);
        free(want.ids);
    }
    free(logits);
    ifl_backend_free(be);
    ifl_model_free(&m);
    return failures;
}

int main(int argc, char **argv)
{
    test_select_isa("test_golden");
    if (argc != 2) {
        fprintf(stderr, "usage: test_golden FIXTURE_DIR\n");
        return 2;
    }
    cJSON *root;
    const cJSON *cases = golden_cases(argv[1], &root);
    if (!cases)
        return 1;
    char tmp[4096];
    test_tmpdir(tmp, sizeof tmp, "golden");
    for (int i = 0; i < cJSON_GetArraySize(cases); i++)
        test_failures += run_case(argv[1], cJSON_GetArrayItem(cases, i), tmp);
    test_rmdir(tmp);
    cJSON_Delete(root);
    return test_finish("test_golden");
}
