/* batcher_fixture.h: what the batcher's tests share: a small random GPT-2 made for the run and
 * loaded with its tokenizer, a thread pool, CPU backends, batchers whose events go to
 * batcher_log.h, a checked submit, and the check that nothing was left in the pool or the queue.
 * Included by test_batcher.c and test_batcher_shares.c (one translation unit each). */
#ifndef IFL_BATCHER_FIXTURE_H
#define IFL_BATCHER_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "batcher_log.h"
#include "make_model.h"
#include "model.h"
#include "testutil.h"
#include "threadpool.h"
#include "util.h"

static ifl_model model;
static ifl_tokenizer *tok;
static ifl_threadpool *pool;
static ifl_tokens hello;

static ifl_backend *make_backend(int32_t max_seqs, int32_t max_tokens)
{
    ifl_err err;
    ifl_backend_params bp = {.max_seqs = max_seqs,
                             .max_tokens = max_tokens,
                             .pool = pool,
                             .kv_block_size = 16,
                             .kv_blocks = 0};
    ifl_backend *be = ifl_cpu_backend_new(&model, &bp, &err);
    if (!be) {
        fprintf(stderr, "backend: %s\n", err.msg);
        exit(1);
    }
    return be;
}

static LOG_MAYBE_UNUSED ifl_batcher *start(ifl_backend *be, ifl_policy pol, int32_t max_batch,
                                           int32_t max_queue, int32_t step_tokens)
{
    ifl_err err;
    ifl_batcher_params p = {.policy = pol,
                            .max_batch = max_batch,
                            .max_queue = max_queue,
                            .step_tokens = step_tokens,
                            .eos_token = 50256,
                            .tok = tok,
                            .on_event = on_event,
                            .on_step = on_step};
    ifl_batcher *b = ifl_batcher_start(be, &p, &err);
    if (!b) {
        fprintf(stderr, "batcher: %s\n", err.msg);
        exit(1);
    }
    return b;
}

static LOG_MAYBE_UNUSED uint64_t submit(ifl_batcher *b, uint64_t session, const int32_t *prompt, int32_t n,
                       int32_t max_tokens, float temperature, uint64_t seed, int n_stop,
                       const char **stop)
{
    ifl_request_params rp = {.session = session,
                             .prompt = prompt,
                             .n_prompt = n,
                             .max_tokens = max_tokens,
                             .sampling = {.temperature = temperature, .top_k = 40, .top_p = 1},
                             .seed = seed,
                             .ignore_eos = 1,
                             .n_stop = n_stop};
    for (int i = 0; i < n_stop; i++)
        rp.stop[i] = stop[i];
    uint64_t id = 0;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, &rp, &id, NULL, &err);
    CHECKF(st == IFL_SUBMIT_OK, "submit refused: %s", err.msg);
    return id;
}

static void check_no_leak(ifl_batcher *b, const char *what)
{
    ifl_batcher_wait_idle(b);
    ifl_batcher_stats st;
    ifl_batcher_get_stats(b, &st);
    CHECKF(st.kv_used == 0 && st.running == 0 && st.waiting == 0,
           "%s: after the test %d KV blocks used, %d running, %d waiting", what, st.kv_used,
           st.running, st.waiting);
}

/* The model (IFL_TEST_QUICK: a smaller one, the same scheduling), its tokenizer, "hello" and the
 * thread pool; dir is the model's temporary directory. Non-zero (with a message) on failure. */
static int fixture_setup(const char *vocab_dir, const char *tag, char *dir, size_t dir_cap)
{
    test_tmpdir(dir, dir_cap, tag);
    ifl_make_model_opts o;
    ifl_make_model_defaults(&o);
    /* IFL_TEST_QUICK (the sanitizer stages, whose forward pass may be 100x slower: ThreadSanitizer
     * without OpenBLAS or AVX-512): a smaller model, the same scheduling */
    o.cfg.n_layer = test_quick() ? 2 : 4;
    o.cfg.n_head = 4;
    o.cfg.n_embd = test_quick() ? 64 : 256;
    o.cfg.n_ctx = 1024;
    o.seed = 31;
    o.scale = 0.05;
    o.vocab_dir = vocab_dir;
    ifl_err err;
    ifl_model_opts mo = {.cpu_layout = 1};
    if (ifl_make_model(dir, &o, &err) || ifl_model_load(&model, dir, &mo, &err) ||
        ifl_tokenizer_load(&tok, dir, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    const char *h = "Hello, how are you?";
    ifl_tokenizer_encode(tok, h, strlen(h), 0, &hello, &err);
    pool = ifl_threadpool_new(ifl_n_cores());
    return 0;
}

static void fixture_teardown(const char *dir)
{
    ifl_threadpool_free(pool);
    ifl_tokens_free(&hello);
    ifl_tokenizer_free(tok);
    ifl_model_free(&model);
    test_rmdir(dir);
}

#endif
