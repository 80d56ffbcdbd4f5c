/* test_batcher_controls.c: the logit controls through the batcher (batcher.h, logit_adj.h) on a
 * tiny random model: with every control on (penalties, logit_bias, stop ids, min_tokens, min_p,
 * top_k, top_p) seeded requests give the same tokens alone and in a batch of 32; a stop id ends a
 * request with STOP (its token event has the id and no text, and counts as a completion token);
 * min_tokens bans EOS and the stop ids before it and allows them at it; presence and frequency
 * penalties change greedy output; stop strings count only in text from min_tokens on; submit
 * refuses bad controls with a message naming the field. IFL_TEST_QUICK=1: a smaller model and
 * shorter completions, the same cases.
 * usage: test_batcher_controls VOCAB_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "batcher_fixture.h"
#include "batcher_log.h"
#include "testutil.h"

#define EOS 50256
#define N_BATCH 32
#define MAX_TOK 24

static const ifl_logit_bias bias[] = {{11, 2.5f}, {13, -3}, {262, 1.5f}, {290, -100}, {198, 4}};
static const int32_t stop_ids[] = {1000, 2000, 3000};

/* Every control on, seed and prompt length varying with i. */
static ifl_request_params all_on(int i, int32_t n_tok)
{
    return (ifl_request_params){
        .session = (uint64_t)(10 + i),
        .prompt = hello.ids,
        .n_prompt = 1 + i % (int32_t)hello.n,
        .max_tokens = n_tok,
        .sampling = {.temperature = 0.9f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f},
        .seed = 1000 + (uint64_t)i,
        .penalties = {.repetition = 1.2f, .presence = 0.5f, .frequency = 0.3f},
        .min_tokens = 3,
        .n_stop_ids = 3,
        .stop_ids = stop_ids,
        .n_logit_bias = 5,
        .logit_bias = bias};
}

static uint64_t submit_rp(ifl_batcher *b, const ifl_request_params *rp)
{
    uint64_t id = 0;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, rp, &id, NULL, &err);
    CHECKF(st == IFL_SUBMIT_OK, "submit refused: %s", err.msg);
    return id;
}

static void test_batch_independent(ifl_batcher *b, int32_t n_tok)
{
    static int32_t alone[N_BATCH][MAX_TOK], batched[N_BATCH][MAX_TOK];
    int n_alone[N_BATCH];
    ifl_event done_alone[N_BATCH], done;
    log_clear();
    for (int i = 0; i < N_BATCH; i++) {
        ifl_request_params rp = all_on(i, n_tok);
        uint64_t id = submit_rp(b, &rp);
        ifl_batcher_wait_idle(b);
        n_alone[i] = collect(id, alone[i], MAX_TOK, NULL, 0, &done_alone[i]);
    }
    log_clear();
    uint64_t ids[N_BATCH];
    for (int i = 0; i < N_BATCH; i++) {
        ifl_request_params rp = all_on(i, n_tok);
        ids[i] = submit_rp(b, &rp);
    }
    ifl_batcher_wait_idle(b);
    int same = 0, stopped = 0;
    for (int i = 0; i < N_BATCH; i++) {
        int n = collect(ids[i], batched[i], MAX_TOK, NULL, 0, &done);
        int ok = n == n_alone[i] && done.finish == done_alone[i].finish &&
                 !memcmp(alone[i], batched[i], (size_t)n * sizeof(int32_t));
        CHECKF(ok, "request %d: %d tokens (%s) in the batch, %d (%s) alone, or other tokens", i,
               n, ifl_finish_name(done.finish), n_alone[i], ifl_finish_name(done_alone[i].finish));
        same += ok;
        stopped += done.finish == IFL_FINISH_STOP;
    }
    printf("every control on: %d/%d seeded requests give the same tokens alone and in a batch of "
           "%d (%d ended on a stop id)\n",
           same, N_BATCH, N_BATCH, stopped);
    check_no_leak(b, "batch independence");
}

/* The text of token event `index` of request id, or NULL. */
static const char *token_text(uint64_t id, int index)
{
    const char *t = NULL;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++)
        if (evlog[i].ev.request_id == id && evlog[i].ev.type == IFL_EV_TOKEN &&
            evlog[i].ev.index == index)
            t = evlog[i].text;
    pthread_mutex_unlock(&log_lock);
    return t;
}

/* A token pushed to the top by logit_bias +100 ends the request at min_tokens exactly (at once
 * without it): as a stop id with STOP, as EOS with EOS; its event has the id and no text. */
static void test_stop_and_min_tokens(ifl_batcher *b)
{
    static const struct {
        int32_t tok, min_tokens;
        int stop_id;
        ifl_finish want;
    } cases[] = {{777, 0, 1, IFL_FINISH_STOP},
                 {777, 4, 1, IFL_FINISH_STOP},
                 {EOS, 0, 0, IFL_FINISH_EOS},
                 {EOS, 5, 0, IFL_FINISH_EOS},
                 {EOS, 5, 1, IFL_FINISH_EOS}}; /* EOS also a stop id: still banned, still EOS */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        log_clear();
        ifl_logit_bias push = {cases[c].tok, 100};
        ifl_request_params rp = {.session = 1,
                                 .prompt = hello.ids,
                                 .n_prompt = (int32_t)hello.n,
                                 .max_tokens = 16,
                                 .sampling = {.temperature = 0.8f, .top_p = 1},
                                 .seed = 5,
                                 .min_tokens = cases[c].min_tokens,
                                 .n_stop_ids = cases[c].stop_id,
                                 .stop_ids = &cases[c].tok,
                                 .n_logit_bias = 1,
                                 .logit_bias = &push};
        uint64_t id = submit_rp(b, &rp);
        ifl_batcher_wait_idle(b);
        int32_t toks[16];
        ifl_event done;
        int n = collect(id, toks, 16, NULL, 0, &done);
        int early = 0;
        for (int i = 0; i + 1 < n; i++)
            early += toks[i] == cases[c].tok;
        const char *last = n > 0 ? token_text(id, n - 1) : NULL;
        CHECKF(n == cases[c].min_tokens + 1 && done.finish == cases[c].want &&
                   done.completion_tokens == n && early == 0 && toks[n - 1] == cases[c].tok &&
                   last && !*last,
               "token %d, min_tokens %d: %d tokens, finish %s (want %d, %s), %d early, last "
               "text '%s'",
               cases[c].tok, cases[c].min_tokens, n, ifl_finish_name(done.finish),
               cases[c].min_tokens + 1, ifl_finish_name(cases[c].want), early,
               last ? last : "(none)");
    }
    printf("stop ids and EOS: banned before min_tokens, allowed at it, no text of their own\n");
    check_no_leak(b, "stop ids");
}

/* Greedy with and without presence / frequency penalties: a tiny random model repeats itself,
 * the penalties make it stop. */
static void test_penalties_change_output(ifl_batcher *b, int32_t n_tok)
{
    static const ifl_penalties pens[] = {{.presence = 0}, {.presence = 2}, {.frequency = 2},
                                         {.repetition = 2}};
    int32_t out[4][MAX_TOK];
    int n[4];
    for (int k = 0; k < 4; k++) {
        log_clear();
        ifl_request_params rp = {.session = 1,
                                 .prompt = hello.ids,
                                 .n_prompt = (int32_t)hello.n,
                                 .max_tokens = n_tok,
                                 .sampling = {.temperature = 0, .top_p = 1},
                                 .ignore_eos = 1,
                                 .penalties = pens[k]};
        uint64_t id = submit_rp(b, &rp);
        ifl_batcher_wait_idle(b);
        ifl_event done;
        n[k] = collect(id, out[k], MAX_TOK, NULL, 0, &done);
        CHECK(n[k] == n_tok);
        if (k > 0)
            CHECKF(memcmp(out[0], out[k], (size_t)n_tok * sizeof(int32_t)) != 0,
                   "penalty %d (presence %g, frequency %g, repetition %g) changed no token", k,
                   (double)pens[k].presence, (double)pens[k].frequency,
                   (double)pens[k].repetition);
    }
    /* with presence 2 every token is pushed down once generated: fewer repeats than without */
    int rep_off = 0, rep_on = 0;
    for (int i = 0; i < n_tok; i++)
        for (int j = 0; j < i; j++) {
            rep_off += out[0][i] == out[0][j];
            rep_on += out[1][i] == out[1][j];
        }
    CHECKF(rep_on < rep_off || rep_off == 0, "presence 2: %d repeated pairs, %d without", rep_on,
           rep_off);
    printf("greedy, %d tokens: %d repeated pairs without penalties, %d with presence 2\n", n_tok,
           rep_off, rep_on);
}

/* A stop string in the text of tokens before min_tokens does not count; from min_tokens on it
 * does. The stop string is the text of one of the first two greedy tokens. */
static void test_stop_string_after_min_tokens(ifl_batcher *b)
{
    log_clear();
    uint64_t id = submit(b, 1, hello.ids, (int32_t)hello.n, 8, 0.0f, 0, 0, NULL); /* greedy */
    ifl_batcher_wait_idle(b);
    int32_t toks[8];
    char text[4096];
    ifl_event done;
    int n = collect(id, toks, 8, text, sizeof text, &done);
    /* the stop string: the text of token 0 or 1 (whichever recurs later), and the token at which
     * it first lies wholly in the text of tokens 2, 3, ... (0: nowhere) */
    char stop[IFL_MAX_STOP_BYTES + 1] = "";
    int later = 0;
    for (int cand = 0; cand < 2 && !later; cand++) {
        const char *t0 = token_text(id, cand);
        if (!t0 || !*t0 || strlen(t0) > IFL_MAX_STOP_BYTES)
            continue;
        strcpy(stop, t0);
        char acc[4096] = "";
        for (int i = 2; i < n && !later; i++) {
            const char *t = token_text(id, i);
            if (t && strlen(acc) + strlen(t) < sizeof acc)
                strcat(acc, t);
            later = strstr(acc, stop) ? i : 0;
        }
    }
    log_clear();
    ifl_request_params rp = {.session = 1,
                             .prompt = hello.ids,
                             .n_prompt = (int32_t)hello.n,
                             .max_tokens = 8,
                             .sampling = {.temperature = 0, .top_p = 1},
                             .ignore_eos = 1,
                             .n_stop = 1,
                             .stop = {stop},
                             .min_tokens = 2};
    if (!stop[0]) {
        printf("stop strings after min_tokens: skipped (the first token has no text)\n");
        return;
    }
    id = submit_rp(b, &rp);
    ifl_batcher_wait_idle(b);
    int m = collect(id, toks, 8, text, sizeof text, &done);
    int want = later ? later + 1 : n; /* ends at its next occurrence, else runs to length */
    CHECKF(m == want && done.finish == (later ? IFL_FINISH_STOP : IFL_FINISH_LENGTH) &&
               strstr(text, stop),
           "stop string '%s' with min_tokens 2: %d tokens, finish %s (want %d); text '%s'", stop,
           m, ifl_finish_name(done.finish), want, text);
    printf("stop string '%s' (in tokens 0-1) with min_tokens 2: released there, then %d tokens, "
           "%s\n",
           stop, m, ifl_finish_name(done.finish));
}

static void expect_invalid(ifl_batcher *b, const ifl_request_params *rp, const char *field)
{
    uint64_t id;
    ifl_err err;
    ifl_submit_status st = ifl_batcher_submit(b, rp, &id, NULL, &err);
    CHECKF(st == IFL_SUBMIT_INVALID && strstr(err.msg, field), "want invalid naming %s, got %s: %s",
           field, ifl_submit_status_name(st), st == IFL_SUBMIT_OK ? "" : err.msg);
}

static void test_refusals(ifl_batcher *b)
{
    ifl_request_params rp = all_on(0, 8);
    rp.sampling.min_p = 2;
    expect_invalid(b, &rp, "min_p 2");
    rp = all_on(0, 8);
    rp.penalties.presence = -3;
    expect_invalid(b, &rp, "presence_penalty -3");
    rp = all_on(0, 8);
    rp.min_tokens = 9;
    expect_invalid(b, &rp, "min_tokens 9 exceeds max_tokens 8");
    rp = all_on(0, 8);
    int32_t bad_stop[1] = {60000};
    rp.stop_ids = bad_stop;
    rp.n_stop_ids = 1;
    expect_invalid(b, &rp, "stop_token_ids entry 0 is 60000");
    rp = all_on(0, 8);
    ifl_logit_bias dup[2] = {{5, 1}, {5, 2}};
    rp.logit_bias = dup;
    rp.n_logit_bias = 2;
    expect_invalid(b, &rp, "logit_bias: token id 5 appears twice");
    check_no_leak(b, "refusals");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_batcher_controls VOCAB_DIR\n");
        return 2;
    }
    char dir[4096];
    if (fixture_setup(argv[1], "batcher-controls", dir, sizeof dir))
        return 1;
    int32_t n_tok = test_quick() ? 10 : MAX_TOK;
    ifl_backend *be = make_backend(N_BATCH, 128);
    ifl_batcher *b = start(be, IFL_POLICY_ITERATIVE, N_BATCH, 64, 128);
    test_batch_independent(b, n_tok);
    test_stop_and_min_tokens(b);
    test_penalties_change_output(b, n_tok);
    test_stop_string_after_min_tokens(b);
    test_refusals(b);
    ifl_batcher_stop(b);

    log_clear();
    free(evlog);
    free(steps);
    free(step_ids);
    free(step_pre);
    ifl_backend_free(be);
    fixture_teardown(dir);
    return test_finish("test_batcher_controls");
}
